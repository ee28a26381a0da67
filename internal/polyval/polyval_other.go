//go:build !amd64 || purego

package polyval

// supported: there is no hardware implementation on this platform.
var supported = []implementation{generic}

func (h *Hash) update(blocks []byte) { h.updateGeneric(blocks) }
