// Package grpcraw is a gRPC codec that passes messages as raw bytes, so
// the tests and the load client (e2e/cmd/grpcload) can run real grpc-go
// clients and servers through sentry without generated code. Use it with
// grpc.ForceCodec(grpcraw.Codec{}) and grpc.ForceServerCodec(grpcraw.Codec{});
// every message is a *[]byte on both sides.
package grpcraw

import "fmt"

// Codec passes messages as they are: a *[]byte on both sides.
type Codec struct{}

func (Codec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("grpcraw: %T is not *[]byte", v)
}

func (Codec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpcraw: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (Codec) Name() string { return "raw" }
