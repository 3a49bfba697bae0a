package admit

// Class is a request's priority. The zero value is Default. A Class the
// package does not know is treated as Default.
type Class uint8

// The classes, served in the order Critical, Default, Sheddable.
const (
	// Default is ordinary traffic.
	Default Class = iota
	// Critical is served before any other class and never shed on arrival.
	Critical
	// Sheddable is served last and refused on arrival while the queue is
	// overloaded (Reason Shed).
	Sheddable
)

// numRanks is the number of wait lists, one per class.
const numRanks = 3

// rank is a class's position in service order: 0 is served first.
func (c Class) rank() int {
	switch c {
	case Critical:
		return 0
	case Sheddable:
		return 2
	default:
		return 1
	}
}

// String returns "critical", "default" or "sheddable" (the config spelling).
func (c Class) String() string {
	switch c {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	default:
		return "default"
	}
}

// Ticket says who is asking for a slot. The zero Ticket is an unidentified
// Default request, which is what Acquire uses.
type Ticket struct {
	// Class is the request's priority.
	Class Class
	// Client identifies the caller inside the app (an API key, a token
	// claim, a remote IP) for fair sharing. "" means unidentified: such a
	// request is not counted as a client and never refused for its share.
	// The string is kept while the client holds or waits for a slot, so it
	// must be an ordinary Go string, not an unsafe view of a reused buffer.
	Client string
}
