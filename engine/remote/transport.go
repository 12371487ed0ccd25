package remote

import (
	"net"
	"net/http"
	"time"
)

// NewTransport is net/http's default transport with more idle connections
// per host (a gateway sends many concurrent requests to each backend, and a
// new connection per request would add a handshake to every turn) and
// connects bounded by connect.
func NewTransport(connect time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
	return t
}
