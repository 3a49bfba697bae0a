package health

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/h2"
)

// The gRPC health checking protocol (grpc/grpc doc/health-checking.md): a
// unary call of grpc.health.v1.Health/Check whose request names the
// service ("" for the whole server) and whose response says SERVING or
// not. Its two messages are a field each, so they are written and read
// here by hand: no generated code for two fields.
//
//	message HealthCheckRequest  { string service = 1; }
//	message HealthCheckResponse { ServingStatus status = 1; } // SERVING = 1

const grpcHealthPath = "/grpc.health.v1.Health/Check"

// grpcServing is HealthCheckResponse's SERVING.
const grpcServing = 1

// maxGRPCResponse bounds the response body read: a HealthCheckResponse
// is a few bytes; a backend that sends more is not a health service.
const maxGRPCResponse = maxDrain

// grpcHealthRequest is the call's body: the 5-byte gRPC message prefix
// (uncompressed, length) and HealthCheckRequest{service}.
func grpcHealthRequest(service string) []byte {
	var msg []byte
	if service != "" { // proto3: an empty string is left out
		msg = append(msg, 1<<3|2) // field 1, length-delimited
		msg = binary.AppendUvarint(msg, uint64(len(service)))
		msg = append(msg, service...)
	}
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// grpcVerdict judges the answer to the health call: healthy only on HTTP
// 200, grpc-status 0 (in the trailers, or a trailers-only head) and a
// HealthCheckResponse whose status is SERVING.
func grpcVerdict(addr string, st *h2.ClientStream, status int, head []hpack.HeaderField) error {
	if status != 200 {
		return &StatusError{Addr: addr, Code: status}
	}
	// A refusal may come as a trailers-only head (grpc-go's own transport)
	// or as a head, no message and trailers (over net/http's server).
	code, msg := grpcCode(head)
	if code > 0 {
		return &GRPCError{Addr: addr, Code: code, Message: msg}
	}
	body, err := io.ReadAll(io.LimitReader(st, maxGRPCResponse+1))
	if err != nil {
		return err
	}
	if len(body) > maxGRPCResponse {
		return fmt.Errorf("gRPC health answer over %d bytes", maxGRPCResponse)
	}
	if tc, tmsg := grpcCode(st.Trailers()); tc >= 0 || code < 0 {
		code, msg = tc, tmsg
	}
	if code != 0 {
		return &GRPCError{Addr: addr, Code: code, Message: msg}
	}
	serving, err := grpcHealthStatus(body)
	if err != nil {
		return err
	}
	if serving != grpcServing {
		return &GRPCError{Addr: addr, Serving: serving}
	}
	return nil
}

// grpcHealthStatus reads the one message of body, a HealthCheckResponse,
// and returns its status (0, UNKNOWN, when left out).
func grpcHealthStatus(body []byte) (int, error) {
	if len(body) < 5 {
		return 0, errors.New("gRPC health answer without a message")
	}
	if body[0] != 0 { // not asked for (no grpc-accept-encoding): refused
		return 0, errors.New("gRPC health answer compressed")
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) != uint64(len(body)-5) {
		return 0, errors.New("gRPC health answer: not one whole message")
	}
	msg, status := body[5:], 0
	for len(msg) > 0 {
		tag, k := binary.Uvarint(msg)
		if k <= 0 {
			return 0, errors.New("gRPC health answer: bad field tag")
		}
		msg = msg[k:]
		num, typ := tag>>3, tag&7
		var v uint64
		switch typ {
		case 0: // varint
			v, k = binary.Uvarint(msg)
		case 1: // 64-bit
			k = 8
		case 2: // length-delimited
			var l uint64
			l, k = binary.Uvarint(msg)
			if k > 0 {
				if l > uint64(len(msg)-k) {
					k = -1
				} else {
					k += int(l)
				}
			}
		case 5: // 32-bit
			k = 4
		default:
			k = -1
		}
		if k <= 0 || k > len(msg) {
			return 0, errors.New("gRPC health answer: malformed message")
		}
		msg = msg[k:]
		if num == 1 && typ == 0 { // the last one wins, as protobuf's
			status = int(min(v, 1<<31-1))
		}
	}
	return status, nil
}

// servingName is a HealthCheckResponse status's name.
func servingName(s int) string {
	switch s {
	case 0:
		return "UNKNOWN"
	case 1:
		return "SERVING"
	case 2:
		return "NOT_SERVING"
	case 3:
		return "SERVICE_UNKNOWN"
	}
	return fmt.Sprintf("status(%d)", s)
}
