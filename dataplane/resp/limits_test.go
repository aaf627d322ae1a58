package resp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// Each failed AUTH of a connection is answered later than the one before, up to lastAuthDelay; a
// new connection starts again, and a right password waits for nothing.
func TestFailedAuthSlowsDownItsConnection(t *testing.T) {
	s := newTestServerWithPassword(t, "the-password")
	var waits []time.Duration
	s.pause = func(d time.Duration) { waits = append(waits, d) }
	w := redcon.NewWriter(nil)
	guess := func(sess *session, password string) {
		s.Dispatch(context.Background(), sess, w, [][]byte{[]byte("AUTH"), []byte(password)})
	}
	sess := &session{}
	for range 8 {
		guess(sess, "wrong")
	}
	guess(&session{}, "wrong")
	guess(sess, "the-password")
	const ms = time.Millisecond
	want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms, 50 * ms}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("failed AUTHs waited %v, want %v", waits, want)
	}
	if !sess.authenticated {
		t.Errorf("the right password after 8 wrong ones did not authenticate")
	}
}

// An error reply costs no allocation of its own: a client sending wrong commands at full speed
// makes no garbage for each.
func TestErrorRepliesDoNotAllocate(t *testing.T) {
	for _, err := range []error{errNoAuth, errWrongPass, errLoading} {
		if n := testing.AllocsPerRun(100, func() { _ = oneLine(replyText(err)) }); n != 0 {
			t.Errorf("the reply %q allocates %v times", err, n)
		}
	}
	if got := oneLine("ERR a\r\nb"); got != "ERR a  b" {
		t.Errorf("oneLine kept line breaks: %q", got)
	}
}

// A write the update log cannot take answers MISCONF, Redis's reply to a write it cannot
// persist, with the reason; other engine errors keep ERR.
func TestNotJournaledAnswersMISCONF(t *testing.T) {
	err := fmt.Errorf("%w: no space left on device", filter.ErrNotJournaled)
	if got, want := replyText(err), "MISCONF the update log cannot be written: no space left on device"; got != want {
		t.Errorf("reply %q, want %q", got, want)
	}
	if got := replyText(filter.ErrTooLarge); !strings.HasPrefix(got, "ERR ") {
		t.Errorf("reply %q, want ERR", got)
	}
}
