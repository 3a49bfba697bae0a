package shape

import "fmt"

// Reason names the limit a request broke. It is the value of the
// Levee-Reject response header and of the reason label on metrics.
type Reason string

// The reasons this package gives, with the status each carries.
const (
	// HeaderBytes: the header fields' names and values sum to more than
	// MaxHeaderBytes. 431 Request Header Fields Too Large.
	HeaderBytes Reason = "header-bytes"
	// HeaderCount: more than MaxHeaderCount header fields. 431.
	HeaderCount Reason = "header-count"
	// URLLength: the request target is longer than MaxURLBytes. 414 URI Too Long.
	URLLength Reason = "url-length"
	// QueryValues: more than MaxQueryValues query parameters. 414: the
	// parameters are part of the request target, and 414 tells the client
	// the one thing that helps — send a shorter target (move the values into
	// a body). 400 would not say which part to fix; 431 is for header fields
	// and 413 for content.
	QueryValues Reason = "query-values"
	// BatchItems: the batch field holds more than Batch.Max items.
	// 422 Unprocessable Content.
	BatchItems Reason = "batch-items"
	// BatchJSON: the body of a route with a batch limit is not valid JSON
	// (a syntax error, or it ends inside a value), so its items cannot be
	// counted. 400 Bad Request: the message itself is malformed.
	BatchJSON Reason = "batch-json"
	// BatchShape: the body is JSON but not of a shape whose items can be
	// counted: its top level is not an object, the batch field is neither an
	// array nor null, or it nests deeper than MaxDepth. 422.
	BatchShape Reason = "batch-shape"
)

// HTTP statuses, spelled out so this package needs no HTTP import.
const (
	statusBadRequest           = 400
	statusURITooLong           = 414
	statusUnprocessable        = 422
	statusHeaderFieldsTooLarge = 431
)

// Violation is a request refused by a shape limit. Status is the HTTP status
// the edge should answer with, Msg a short text for the response body that
// names the limit. Violations returned by this package are shared between
// requests: treat them as read-only.
type Violation struct {
	Reason Reason
	Status int
	Msg    string
}

func (v *Violation) Error() string {
	return "shape: " + string(v.Reason) + ": " + v.Msg
}

func newViolation(reason Reason, status int, format string, args ...any) *Violation {
	return &Violation{Reason: reason, Status: status, Msg: fmt.Sprintf(format, args...)}
}

// Violations whose message does not depend on a limit, shared by every reader.
var (
	errSyntax = &Violation{Reason: BatchJSON, Status: statusBadRequest,
		Msg: "request body is not valid JSON"}
	errTruncated = &Violation{Reason: BatchJSON, Status: statusBadRequest,
		Msg: "request body ends inside a JSON value"}
	errNotObject = &Violation{Reason: BatchShape, Status: statusUnprocessable,
		Msg: "request body is not a JSON object"}
	errTooDeep = &Violation{Reason: BatchShape, Status: statusUnprocessable,
		Msg: fmt.Sprintf("request body nests JSON deeper than %d levels", MaxDepth)}
)
