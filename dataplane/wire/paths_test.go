package wire

import "testing"

// The public paths are filter-service's: clients written for it must find them unchanged. The
// internal ones are what pods of different versions call each other at during a rolling update.
func TestPaths(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{PingPath, "/v1/ping"},
		{ListPath, "/v1/bloomfilter/list"},
		{FilterPath("users"), "/v1/bloomfilter/users"},
		{FilterPath("a/b c"), "/v1/bloomfilter/a%2Fb%20c"},
		{FilterOpPath("users", OpCheck), "/v1/bloomfilter/users/check"},
		{FilterOpPath("users", OpMultiCheck), "/v1/bloomfilter/users/multi-check"},
		{FilterOpPath("users", OpCheckAndSet), "/v1/bloomfilter/users/check-and-set"},
		{FilterOpPath("users", OpMultiCheckAndSet), "/v1/bloomfilter/users/multi-check-and-set"},
		{FilterOpPath("users", OpSet), "/v1/bloomfilter/users/set"},
		{FilterOpPath("users", OpMultiSet), "/v1/bloomfilter/users/multi-set"},
		{FilterOpPath("users", OpDump), "/v1/bloomfilter/users/dump"},
		{FilterOpPath("users", OpMerge), "/v1/bloomfilter/users/merge"},
		{FilterRoute, "/v1/bloomfilter/:name"},
		{FilterOpRoute(OpCheckAndSet), "/v1/bloomfilter/:name/check-and-set"},
		{MembershipPath, "/internal/v1/membership"},
		{ApplyPath, "/internal/v1/apply"},
		{ApplyStreamPath, "/internal/v1/apply/stream"},
		{InventoryPath, "/internal/v1/inventory"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s, want %s", tc.got, tc.want)
		}
	}
}

func TestInternalPath(t *testing.T) {
	for _, tc := range []struct{ public, internal string }{
		{FilterOpPath("users", OpCheck), "/internal/v1/bloomfilter/users/check"},
		{FilterRoute, "/internal/v1/bloomfilter/:name"},
		{ListPath, "/internal/v1/bloomfilter/list"},
	} {
		if got := InternalPath(tc.public); got != tc.internal {
			t.Errorf("InternalPath(%q) = %q, want %q", tc.public, got, tc.internal)
		}
	}
}
