package server

// SetBeforeRecovery makes Run call f when recovery starts, so that a test can hold recovery open
// and look at the server meanwhile.
func SetBeforeRecovery(s *Server, f func()) { s.beforeRecovery = f }
