// Package compact holds the decisions of server-side compaction that do not depend on the wire
// dialect: how many input tokens a request carries (tokens.go), when the client or the operator
// wants compaction (threshold.go), which items are kept verbatim and which are summarised
// (window.go), what is sealed inside a compaction item (payload.go), and how the summarised items
// are rendered as text for the summariser (transcript.go).
//
// Everything here works on api.Item's raw bytes with gjson: agents resend multi-megabyte
// histories every turn, and decoding them into Go values would cost tens of milliseconds a turn
// (see shared/docs/architecture.md).
package compact
