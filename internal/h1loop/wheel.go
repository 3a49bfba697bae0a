package h1loop

// wheel files each connection under the tick its deadline falls in, so a
// loop with thousands of connections keeps no runtime timer per
// connection and changes none per request: a request that moves its
// connection's deadline later writes one field (entry.due), and the
// connection is filed again, lazily, when its old slot comes round.
//
// A deadline is a tick number (the loop's clock divided by its tick). An
// entry sits in the slot of the tick it was filed for, which is never
// after its due: moving due later leaves it where it is; moving it
// earlier refiles it at once (file). Not safe for concurrent use: the
// loop owns it.
type wheel struct {
	slots []entryList
	now   int64 // the last tick expire has passed
}

// entry is a connection's place in the wheel, embedded in it.
type entry struct {
	due        int64 // the tick the deadline falls in; 0: none
	filed      int64 // the tick of the slot it sits in; 0: not filed
	prev, next *entry
	owner      any // what expire hands back
}

// entryList is an intrusive doubly linked list with a sentinel.
type entryList struct{ head entry }

func newWheel(slots int, now int64) *wheel {
	w := &wheel{slots: make([]entryList, slots), now: now}
	for i := range w.slots {
		l := &w.slots[i]
		l.head.prev, l.head.next = &l.head, &l.head
	}
	return w
}

// set gives e the deadline due (a tick; 0: none): filed at once if it is
// earlier than the slot e sits in, else left to be refiled when that slot
// comes round.
func (w *wheel) set(e *entry, due int64) {
	e.due = due
	if due == 0 {
		w.remove(e)
		return
	}
	if e.filed == 0 || due < e.filed {
		w.file(e, due)
	}
}

// file puts e in the slot of tick at (never one already passed).
func (w *wheel) file(e *entry, at int64) {
	w.remove(e)
	if at <= w.now {
		at = w.now + 1
	}
	l := &w.slots[at%int64(len(w.slots))]
	e.filed = at
	e.prev, e.next = l.head.prev, &l.head
	l.head.prev.next = e
	l.head.prev = e
}

// remove takes e out of the wheel, if it is in it.
func (w *wheel) remove(e *entry) {
	if e.filed == 0 {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next, e.filed = nil, nil, 0
}

// expire passes every tick up to now and calls fn with the owner of each
// entry whose deadline has come, after taking it out of the wheel; an
// entry whose deadline moved later is filed again. fn may set or remove
// entries, its own included.
func (w *wheel) expire(now int64, fn func(owner any)) {
	// A jump of more than one turn passes every slot once.
	from := max(w.now+1, now-int64(len(w.slots))+1)
	for t := from; t <= now; t++ {
		w.now = t
		l := &w.slots[t%int64(len(w.slots))]
		// Detach the slot's list first: fn and refiling may add to it.
		first, last := l.head.next, l.head.prev
		if first == &l.head {
			continue
		}
		l.head.prev, l.head.next = &l.head, &l.head
		first.prev, last.next = nil, nil
		for e := first; e != nil; {
			next := e.next
			e.prev, e.next, e.filed = nil, nil, 0
			switch {
			case e.due == 0:
				// no deadline: out of the wheel
			case e.due > t:
				w.file(e, e.due)
			default:
				fn(e.owner)
			}
			e = next
		}
	}
	w.now = max(w.now, now)
}
