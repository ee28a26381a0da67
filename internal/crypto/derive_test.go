package crypto

import (
	"bytes"
	"errors"
	"testing"
)

func TestDerive(t *testing.T) {
	a, b := testKey("ka", 1), testKey("kb", 2)
	r := mustKeyring(t, a, b)
	rotated := mustKeyring(t, b, a)

	active, _ := r.Derive("", "index")
	pinned, _ := r.Derive("ka", "index")
	afterRotation, _ := rotated.Derive("ka", "index")
	other, _ := r.Derive("ka", "something else")
	retired, _ := r.Derive("kb", "index")
	tests := []struct {
		name string
		x, y []byte
		same bool
	}{
		{"active is the named active key", active, pinned, true},
		{"a pinned key survives rotation", pinned, afterRotation, true},
		{"purposes are separated", pinned, other, false},
		{"keys are separated", pinned, retired, false},
	}
	for _, tt := range tests {
		if bytes.Equal(tt.x, tt.y) != tt.same || len(tt.x) != 32 {
			t.Errorf("%s: same=%v", tt.name, !tt.same)
		}
	}
	if _, err := r.Derive("nope", "index"); !errors.Is(err, ErrNoSuchKey) {
		t.Errorf("unknown key id: err = %v", err)
	}
	if _, err := r.Derive("", ""); err == nil {
		t.Error("empty purpose accepted")
	}
}
