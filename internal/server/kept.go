package server

// kept is one per-app component that outlives reloads while the settings
// it was made from stay the same: a reload with equal settings keeps it
// (and what it has counted or learnt), a change makes a new one. A new
// per-app setting that must survive reloads is one kept field and one
// apply call. The zero kept holds nothing; guarded by Server.mu.
type kept[C comparable, V any] struct {
	cfg  C
	v    V
	made bool
}

// apply returns the component for cfg: the one held if it was made from
// cfg, else build(cfg), after drop (when not nil) has released the old.
// build may return V's zero value for a setting that is off.
func (k *kept[C, V]) apply(cfg C, build func(C) V, drop func(V)) V {
	if k.made && k.cfg == cfg {
		return k.v
	}
	k.reset(drop)
	k.cfg, k.v, k.made = cfg, build(cfg), true
	return k.v
}

// reset releases the component held with drop (when not nil), so that the
// next apply makes a new one.
func (k *kept[C, V]) reset(drop func(V)) {
	if k.made && drop != nil {
		drop(k.v)
	}
	*k = kept[C, V]{}
}
