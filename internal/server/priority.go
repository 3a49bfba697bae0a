package server

import (
	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/limits"
)

// classifier is limits.Classifier: limits.priority, shared with the
// admission middleware.
type classifier = limits.Classifier

// ticketSlot releases a slot taken with a client ticket.
type ticketSlot struct {
	l *admit.Limiter
	t admit.Ticket
}

func (s *ticketSlot) Release() { s.l.ReleaseFor(s.t) }
