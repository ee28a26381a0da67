package api

// Raws returns the raw JSON of each element of xs, in order, as the byte-slice type S the
// consumer takes: [][]byte for the body rebuilders (WithInput, WithMessages, JSONArray),
// []json.RawMessage for the memo's hashes. The bytes are shared, not copied.
//
//	api.Raws[[]byte](req.Messages)
//	api.Raws[json.RawMessage](items)
func Raws[S ~[]byte, T hasRaw](xs []T) []S {
	out := make([]S, len(xs))
	for i, x := range xs {
		out[i] = x.rawJSON()
	}
	return out
}

// hasRaw is an element of a parsed body that keeps its exact bytes.
type hasRaw interface {
	Item | ChatMessage | Message
	rawJSON() []byte
}

func (it Item) rawJSON() []byte       { return it.Raw }
func (m ChatMessage) rawJSON() []byte { return m.Raw }
func (m Message) rawJSON() []byte     { return m.Raw }
