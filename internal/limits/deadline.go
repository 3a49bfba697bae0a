package limits

import "github.com/leveeproxy/levee/internal/reply"

// DeadlinePassed is the refusal, counted, of a request whose deadline
// passed before it could be sent: the client's own (grpc-timeout, or
// Levee-Deadline from a levee in front) or the app's upstream.deadline.timeout.
// The backend never gets work no one waits for.
func (g *Gate) DeadlinePassed() Refusal {
	g.Count.Rejected(reply.Deadline)
	return Refusal{Code: reply.DeadlineReply.Status, Reason: reply.Deadline}
}
