package resp

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// A check-and-set or create that the filter's home did not serve (HTTP's 503 codes 13 and 14),
// here or at the home it went to, is answered TRYAGAIN, which clients retry; other failures of
// the home stay ERR.
func TestAHomeThatDidNotServeIsAnsweredTryAgain(t *testing.T) {
	for _, code := range []int{wire.CodeHomeUnavailable, wire.CodeLeaseLapsed} {
		if got := replyText(&writes.HomeUnavailableError{Code: code, Reason: "the home is away"}); got != "TRYAGAIN the home is away" {
			t.Errorf("code %d served here: %q", code, got)
		}
		a := &client.Answer{Status: http.StatusServiceUnavailable, ContentType: "application/json",
			Body: []byte(`{"error":"the home is away","code":` + strconv.Itoa(code) + `}`)}
		if got := replyText(answerError(a)); got != "TRYAGAIN the home is away" {
			t.Errorf("code %d answered by the home: %q", code, got)
		}
	}
	a := &client.Answer{Status: http.StatusServiceUnavailable, ContentType: "application/json", Body: []byte(`{"error":"replication incomplete","code":9}`)}
	if got := replyText(answerError(a)); got != "ERR replication incomplete" {
		t.Errorf("code 9 answered by the home: %q", got)
	}
}
