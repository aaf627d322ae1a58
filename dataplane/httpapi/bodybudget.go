package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// bodyBudget bounds the bytes of request bodies the client port holds at once
// (maxRequestBytesInFlight): a thousand connections each sending a body of the largest size
// would otherwise hold a thousand times maxHttpRequestLength.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

// take takes n bytes of the budget, or reports false when they would exceed it.
func (b *bodyBudget) take(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Take takes n bytes for a command of the RESP port, which shares the budget: a limit of 0 is no
// limit.
func (b *bodyBudget) Take(n int64) bool {
	if b.limit == 0 {
		return true
	}
	return b.take(n)
}

// Release gives back what Take took.
func (b *bodyBudget) Release(n int64) {
	if b.limit != 0 {
		b.used.Add(-n)
	}
}

// SharedBudget is the budget of request bytes in flight (maxRequestBytesInFlight) that run hands
// the RESP port, so that both ports' requests together stay within it.
type SharedBudget interface {
	Take(n int64) bool
	Release(n int64)
}

// Budget is the client port's budget of request bytes in flight, for the RESP port to share.
func (s *Server) Budget() SharedBudget { return s.bodies }

// errBodyBudget ends the read of a body that the budget has no room for.
var errBodyBudget = errors.New("request bodies in flight at their limit")

// budgetedBody charges the bytes read from a body to the budget, and gives them back when the
// request ends: the handlers hold what they read until then.
type budgetedBody struct {
	io.ReadCloser
	budget *bodyBudget
	held   int64
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if !b.budget.take(int64(n)) {
			return 0, errBodyBudget
		}
		b.held += int64(n)
	}
	return n, err
}

// budgetedBodies are reused: every request with a body takes one.
var budgetedBodies = sync.Pool{New: func() any { return new(budgetedBody) }}

// limitBodies charges every request body of the router to the budget.
func (s *Server) limitBodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Body == nil || req.Body == http.NoBody {
			return next(c)
		}
		b := budgetedBodies.Get().(*budgetedBody)
		*b = budgetedBody{ReadCloser: req.Body, budget: s.bodies}
		req.Body = b
		defer s.giveBack(b)
		return next(c)
	}
}

// giveBack returns what a finished request's body held. Nothing reads the body once its handler
// returned: net/http closes the request's own body, not this wrapper.
func (s *Server) giveBack(b *budgetedBody) {
	s.bodies.used.Add(-b.held)
	*b = budgetedBody{}
	budgetedBodies.Put(b)
}

// decodedValueBytes is what one value of a multi-value request holds until the request ends,
// besides its bytes in the body: its string header, its answer, and the answer's bytes in the
// response. A body of empty strings holds many times its size once decoded.
const decodedValueBytes = 24

// chargeValues charges the memory that n decoded values hold to the request's share of the body
// budget, so that the budget bounds what requests hold, not only what they sent.
func (s *Server) chargeValues(c echo.Context, n int) error {
	b, ok := c.Request().Body.(*budgetedBody)
	if !ok {
		return nil
	}
	cost := int64(n) * decodedValueBytes
	if b.held+cost > b.budget.limit {
		return &apiError{http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, fmt.Sprintf(
			"the request's %d values hold %s once decoded, more than one request may (maxRequestBytesInFlight, %s): send fewer values per request",
			n, filter.FormatBytes(uint64(b.held+cost)), filter.FormatBytes(uint64(b.budget.limit)))}
	}
	if !b.budget.take(cost) {
		return s.readError(c, errBodyBudget)
	}
	b.held += cost
	return nil
}

// readError is the answer to a body that could not be read.
func (s *Server) readError(c echo.Context, err error) error {
	if errors.Is(err, errBodyBudget) {
		s.Metrics.HTTP.BodyRefused()
		c.Response().Header().Set("Retry-After", "1")
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, fmt.Sprintf(
			"the pod holds %s of request bodies, its limit (maxRequestBytesInFlight): retry shortly",
			filter.FormatBytes(uint64(s.bodies.limit)))}
	}
	return badRequest("could not read the request body: " + err.Error())
}
