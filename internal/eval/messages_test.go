package eval

import (
	"context"
	"os"
	"testing"
)

// messagesCI is the CI-sized Messages run: one Claude Code session, three compactions.
func messagesCI(seed uint64) Config {
	c := ciConfig(seed)
	c.API, c.Sessions, c.Shapes = APIMessages, 1, nil
	return c
}

func TestEvalMessagesScratch(t *testing.T) {
	rep, err := Run(context.Background(), messagesCI(1))
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteText(os.Stdout)
}
