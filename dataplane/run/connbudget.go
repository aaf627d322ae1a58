package run

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Why the budget closed a connection, the reason label of bloomery_http_connections_closed_total.
const (
	// closedIdle: an idle keep-alive connection, the oldest, closed to admit a new one.
	closedIdle = "idle"
	// closedUnanswered: a connection that had sent no complete request yet, the oldest, closed to
	// admit a new one when no idle connection was left.
	closedUnanswered = "no_request"
)

// connMetrics counts what the budget does (metrics.HTTP).
type connMetrics interface {
	ConnState(net.Conn, http.ConnState)
	ConnRefused(port string)
	ConnClosed(port, reason string)
}

// connBudget holds a port to max connections without letting idle or silent clients hold it:
// when it is full, a new connection closes the oldest idle keep-alive connection, or failing one
// the oldest that has sent no complete request (the header deadline would close it soon anyway);
// only when every connection is answering a request is the new one refused. A port with a probe
// reserve (the ops port) admits that many more connections then, which are served the probes
// alone, so that the kubelet's liveness probe is answered whatever holds the budget.
//
// It sees the connections through the http.Server's ConnContext and ConnState hooks, which get
// the same net.Conn (the *tls.Conn over TLS). A hijacked connection (a peer's stream of
// replicated writes) leaves the budget, as it leaves the server.
type connBudget struct {
	port         string
	max, reserve int
	metrics      connMetrics
	now          func() time.Time

	mu    sync.Mutex
	conns map[net.Conn]*budgetConn
	// probes counts the open connections admitted on the reserve.
	probes int
}

// budgetConn is a connection the budget admitted.
type budgetConn struct {
	state http.ConnState
	since time.Time // when it entered state
	// probeOnly: admitted on the probe reserve, served the probes alone.
	probeOnly bool
}

func newConnBudget(port string, maxConns, reserve int, m connMetrics) *connBudget {
	return &connBudget{port: port, max: maxConns, reserve: reserve, metrics: m, now: time.Now, conns: map[net.Conn]*budgetConn{}}
}

// budgetKey is the context key of a request's budgetConn.
type budgetKey struct{}

// connContext is the http.Server's ConnContext hook: it admits c, making room for it, or refuses
// it. It runs in the server's accept loop, before the connection is served.
func (b *connBudget) connContext(ctx context.Context, c net.Conn) context.Context {
	admitted, evicted, reason := b.admit(c)
	if evicted != nil {
		b.metrics.ConnClosed(b.port, reason)
		// Closing a TLS connection writes its close_notify, which may wait for a reader that
		// does not read: not in the accept loop.
		go func() { _ = evicted.Close() }()
	}
	if admitted == nil {
		b.metrics.ConnRefused(b.port)
		go refuse(c)
		return ctx
	}
	return context.WithValue(ctx, budgetKey{}, admitted)
}

// admit registers c, answering the connection to close to make room for it and why, or nil when
// it cannot be admitted.
func (b *connBudget) admit(c net.Conn) (admitted *budgetConn, evicted net.Conn, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	admitted = &budgetConn{state: http.StateNew, since: b.now()}
	if len(b.conns)-b.probes < b.max {
		b.conns[c] = admitted
		return admitted, nil, ""
	}
	if evicted, reason = b.oldest(http.StateIdle, closedIdle); evicted == nil {
		evicted, reason = b.oldest(http.StateNew, closedUnanswered)
	}
	if evicted != nil {
		b.forget(evicted)
		b.conns[c] = admitted
		return admitted, evicted, reason
	}
	if b.probes < b.reserve {
		admitted.probeOnly = true
		b.probes++
		b.conns[c] = admitted
		return admitted, nil, ""
	}
	return nil, nil, ""
}

// oldest answers the connection in state the longest, not on the probe reserve, or nil.
func (b *connBudget) oldest(state http.ConnState, reason string) (net.Conn, string) {
	var found net.Conn
	var since time.Time
	for c, bc := range b.conns {
		if bc.state == state && !bc.probeOnly && (found == nil || bc.since.Before(since)) {
			found, since = c, bc.since
		}
	}
	if found == nil {
		return nil, ""
	}
	return found, reason
}

// forget drops c from the budget; the caller holds mu.
func (b *connBudget) forget(c net.Conn) {
	if bc, ok := b.conns[c]; ok {
		if bc.probeOnly {
			b.probes--
		}
		delete(b.conns, c)
	}
}

// connState is the http.Server's ConnState hook: it follows the admitted connections' states.
func (b *connBudget) connState(c net.Conn, state http.ConnState) {
	b.metrics.ConnState(c, state)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		b.forget(c)
	default:
		if bc, ok := b.conns[c]; ok {
			bc.state, bc.since = state, b.now()
		}
	}
}

// refuse answers a connection the budget cannot admit 503 when it speaks plain HTTP (over TLS
// the handshake would cost more than the refusal saves), and closes it.
func refuse(c net.Conn) {
	if _, isTLS := c.(*tls.Conn); !isTLS {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 45\r\n\r\nall connections of this port answer requests\n"))
	}
	_ = c.Close()
}

// probesOnly serves the probes alone to connections admitted on the probe reserve, and closes
// them after the answer, so that the reserve is free for the next probe.
func probesOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bc, _ := r.Context().Value(budgetKey{}).(*budgetConn)
		if bc == nil || !bc.probeOnly {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if r.URL.Path != wire.HealthzPath && r.URL.Path != wire.ReadyzPath {
			http.Error(w, "all connections of the ops port are in use: this one serves /healthz and /readyz alone", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}
