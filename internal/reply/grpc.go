package reply

import "strings"

// IsGRPC reports whether a request's Content-Type is gRPC's
// (application/grpc, application/grpc+proto, application/grpc;…): its
// client reads an answer only from grpc-status, and its body is a stream
// of messages rather than a document.
func IsGRPC(contentType string) bool {
	rest, ok := strings.CutPrefix(contentType, "application/grpc")
	if !ok {
		if len(contentType) < len("application/grpc") || !strings.EqualFold(contentType[:len("application/grpc")], "application/grpc") {
			return false
		}
		rest = contentType[len("application/grpc"):]
	}
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}
