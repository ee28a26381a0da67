//go:build !amd64 || purego

package polyval

// Accelerated reports whether a hardware implementation is used; there is none on this
// platform.
var Accelerated = false

func (h *Hash) update(blocks []byte) { h.updateGeneric(blocks) }
