package resp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"time"
)

// The texts Redis 7.0 answers about authentication, word for word: clients match them.
const (
	errNoAuth      = replyError("NOAUTH Authentication required.")
	errWrongPass   = replyError("WRONGPASS invalid username-password pair or user is disabled.")
	errHelloNoAuth = replyError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
	errNoPassword  = replyError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
)

// defaultUser is the one user: Redis's name for the user of requirepass.
const defaultUser = "default"

// auth is AUTH password and AUTH default password. Without a password configured, Redis's
// default user takes any password in the second form and refuses the first as a likely mistake.
// A failed AUTH leaves the connection as it was.
func auth(_ context.Context, s *Server, c *call) error {
	switch len(c.args) {
	case 2:
		if !s.hasPassword {
			return errNoPassword
		}
		if err := s.authenticate(c.sess, []byte(defaultUser), c.args[1]); err != nil {
			return err
		}
	case 3:
		if err := s.authenticate(c.sess, c.args[1], c.args[2]); err != nil {
			return err
		}
	default:
		return errorf("syntax error")
	}
	c.w.WriteString("OK")
	return nil
}

// authenticate marks sess authenticated when user and password are the default user's. The
// password is compared as SHA-256 digests in constant time, so that neither its length nor
// where it differs shows in the time taken; a failure is counted.
func (s *Server) authenticate(sess *session, user, password []byte) error {
	digest := sha256.Sum256(password)
	same := subtle.ConstantTimeCompare(digest[:], s.password[:]) == 1
	if string(user) == defaultUser && (same || !s.hasPassword) {
		sess.authenticated = true
		return nil
	}
	if s.opts.Metrics != nil {
		s.opts.Metrics.RESP.AuthFailed()
	}
	sess.authFailures++
	s.pause(authDelay(sess.authFailures))
	return errWrongPass
}

// firstAuthDelay and lastAuthDelay bound how long a connection's failed AUTH waits before it is
// answered: the first waits the first, and each next one twice the one before, up to the last. A
// client with a stale password loses 50 ms; one guessing on a connection gets a guess every two
// seconds instead of hundreds of thousands a second (a new connection starts again, and
// respMaxClients bounds those).
const (
	firstAuthDelay = 50 * time.Millisecond
	lastAuthDelay  = 2 * time.Second
)

// authDelay is the wait of a connection's nth failed authentication.
func authDelay(n int) time.Duration {
	if n > 16 { // past the last already; keeps the shift below from overflowing
		return lastAuthDelay
	}
	return min(firstAuthDelay<<(n-1), lastAuthDelay)
}

// sleep waits d, or until the server drains: shutting down waits for no guesser.
func (s *Server) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.drained:
	}
}
