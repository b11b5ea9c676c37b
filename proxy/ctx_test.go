package proxy

import (
	"bufio"
	"context"
	"strings"
	"time"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// bufioReader wraps a string for fasthttp header parsing.
func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
