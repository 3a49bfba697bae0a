package apps

// Kept is one per-app component that outlives reloads while the settings
// it was made from stay the same: a reload with equal settings keeps it
// (and what it has counted or learnt), a change makes a new one. A new
// per-app setting that must survive reloads is one Kept field of App and
// one Apply call in Table.Compose. The zero Kept holds nothing; guarded by
// its owner's lock.
type Kept[C comparable, V any] struct {
	cfg  C
	v    V
	made bool
}

// Apply returns the component for cfg: the one held if it was made from
// cfg, else build(cfg), after drop (when not nil) has released the old.
// build may return V's zero value for a setting that is off.
func (k *Kept[C, V]) Apply(cfg C, build func(C) V, drop func(V)) V {
	if k.made && k.cfg == cfg {
		return k.v
	}
	k.Reset(drop)
	k.cfg, k.v, k.made = cfg, build(cfg), true
	return k.v
}

// Reset releases the component held with drop (when not nil), so that the
// next Apply makes a new one.
func (k *Kept[C, V]) Reset(drop func(V)) {
	if k.made && drop != nil {
		drop(k.v)
	}
	*k = Kept[C, V]{}
}
