package compact

import (
	"errors"
	"runtime/debug"
	"strings"
	"testing"
)

// A sealed payload is compactd's own JSON, but parsePayload still bounds its depth before gjson
// reads it: gjson.ValidBytes recursed once per level, and a crash is worse than a refusal. The
// stack limit is lowered so that the old code fails on a modest payload.
func TestUnmarshalPayloadDeep(t *testing.T) {
	old := debug.SetMaxStack(8 << 20)
	defer debug.SetMaxStack(old)
	for name, js := range map[string]string{
		"arrays":  `{"v":1,"x":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`,
		"objects": `{"v":1,"x":` + strings.Repeat(`{"a":`, 200_000) + "1" + strings.Repeat("}", 200_001),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := UnmarshalPayload(append([]byte{encRaw}, js...)); !errors.Is(err, ErrPayload) {
				t.Fatalf("UnmarshalPayload = %v, want ErrPayload", err)
			}
		})
	}
}
