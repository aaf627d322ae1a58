//go:build !unix

package filter

// allocWords allocates n zeroed words in the heap where anonymous mappings are not available.
func allocWords(n int) (words []uint64, release func(), err error) {
	return make([]uint64, n), func() {}, nil
}
