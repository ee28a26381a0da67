package stackcheck

import "testing"

func TestRunCountsAllocations(t *testing.T) {
	var keep []byte
	n := Run(func() { keep = make([]byte, 1<<20) })
	if n < 1<<20 || len(keep) != 1<<20 {
		t.Fatalf("Run counted %d bytes for a 1 MiB allocation", n)
	}
}
