package archive

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The event log is what the operator console (internal/console) shows of a conversation: one
// append-only row per compaction (and failed compaction), per memo application and per recall
// search, in the archive's database beside the segments they concern. A row is keyed by
// (tenant, conversation, owner, time) like everything else the archive holds: the conversation
// id is a label within the owner's namespace.
//
// What is in the clear: the identity columns and the figures and labels an operator filters and
// counts by (kind, API and route, client kind, trigger, outcome, model, token counts, item
// counts, latency, the archive segment and compaction item it concerns). What is content — the
// handoff text a compaction produced (summary, facts ledger, gap-check findings), a recall
// query and the excerpts it returned — is sealed with the archive's Sealer, bound to the row's
// id and tenant, and the sealed plaintext repeats the identity columns, so a row whose columns
// were altered or a blob moved to another row fails to open. Content is read only when asked
// for (EventLog.List with content).
//
// The log is bounded: a tenant holds at most EventOptions.MaxPerTenant rows (the oldest go
// first, by the Append that overflows), Prune's MaxAge deletes rows as old as the segments it
// deletes, and DeleteConversation deletes a conversation's rows with its segments and memo rows,
// in the same transaction.

// Event kinds.
const (
	EventCompaction       = "compaction"        // a compaction succeeded
	EventCompactionFailed = "compaction_failed" // a compaction could not be completed
	EventMemoApplied      = "memo_applied"      // the memo applied a remembered compaction to a turn
	EventRecall           = "recall"            // the model searched the archive with the recall tool
)

// Event is one row of the event log.
type Event struct {
	ID           string // "evt_" + random, set by Append when empty
	Tenant       string // "default" when empty
	Conversation string // required
	Owner        string // the owner digest of the request that caused it (internal/owner)
	Kind         string // Event* constant, required
	CreatedAt    time.Time

	// Clear-text labels and figures: compactd's own words and numbers, never client content.
	API      string // the route's dialect name (internal/dialect): "responses", "messages", "chat"
	Route    string // the route pattern, e.g. "/v1/responses"
	Client   string // client kind: codex, claude_code, chat_agent, sdk, other
	Trigger  string // threshold, policy, compact_endpoint, compaction_trigger, on_demand, agent
	Outcome  string // ok, extractive, fail, passthrough, …
	Flags    string // space-separated words: speculation (a speculative summary was used), …
	Model    string // the summariser model
	Item     string // the compaction item or block id
	Segment  string // the archive segment of what the compaction replaced
	Before   int    // tokens before
	After    int    // tokens after
	Items    int    // items replaced (compaction), items covered (memo), excerpts (recall)
	Latency  time.Duration
	Bytes    int  // sealed content size
	Sealed   bool // the row has sealed content
	Content  *EventContent
	contentB string
}

// EventContent is what an event holds that is content: sealed at rest, and shown by the console
// only with --console-content.
type EventContent struct {
	Summary  string         `json:"summary,omitempty"`
	Ledger   string         `json:"ledger,omitempty"` // the facts ledger, gap-check findings included
	Query    string         `json:"query,omitempty"`  // recall
	Excerpts []EventExcerpt `json:"excerpts,omitempty"`
	Error    string         `json:"error,omitempty"` // a failed compaction's error, as compactd logs it
}

// EventExcerpt is one recall hit as the model received it.
type EventExcerpt struct {
	Segment string `json:"segment"`
	Item    int    `json:"item"`
	Text    string `json:"text"`
}

// EventOptions bounds the log. Zero fields take the defaults.
type EventOptions struct {
	// MaxPerTenant is how many rows one tenant may hold (default DefaultEventsPerTenant); past
	// it the oldest rows are deleted by the Append that overflows.
	MaxPerTenant int
}

const (
	// DefaultEventsPerTenant bounds each tenant's rows: at a few compactions an hour per
	// conversation and one memo row per transparent turn, weeks of a busy team.
	DefaultEventsPerTenant = 20_000
	// MaxEventContent is about the most sealed content one row holds (before compression):
	// longer texts are cut to their field's cap, keeping their start.
	MaxEventContent = 64 << 10
	// maxEventList bounds what one List returns (a conversation's newest rows).
	maxEventList = 2_000
	// maxEventLabel bounds each clear-text label.
	maxEventLabel = 128
)

// EventLog is the event log kept in an archive Store's database. Safe for concurrent use.
type EventLog struct {
	s *sqlStore
	o EventOptions
}

// NewEventLog returns the event log of st (the schema is created by Open); ErrMemoNoStore when
// st is not one of this package's SQL stores.
func NewEventLog(st Store, o EventOptions) (*EventLog, error) {
	s, ok := st.(*sqlStore)
	if !ok {
		return nil, ErrMemoNoStore
	}
	if o.MaxPerTenant <= 0 {
		o.MaxPerTenant = DefaultEventsPerTenant
	}
	return &EventLog{s: s, o: o}, nil
}

func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

func clipLabel(s string) string {
	if len(s) > maxEventLabel {
		return s[:maxEventLabel]
	}
	return s
}

// eventPlain is the sealed plaintext: length-prefixed identity fields, then the content JSON.
func eventPlain(e *Event, content []byte) []byte {
	b := make([]byte, 0, 96+len(content))
	for _, s := range []string{e.ID, e.Tenant, e.Conversation, e.Owner, e.Kind} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, e.CreatedAt.UnixMicro())
	return append(b, content...)
}

func openEventPlain(p []byte, e *Event) ([]byte, error) {
	for _, s := range []string{e.ID, e.Tenant, e.Conversation, e.Owner, e.Kind} {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) || string(p[k:k+int(n)]) != s {
			return nil, errors.New("columns differ from sealed header")
		}
		p = p[k+int(n):]
	}
	t, k := binary.Varint(p)
	if k <= 0 || t != e.CreatedAt.UnixMicro() {
		return nil, errors.New("time differs from sealed header")
	}
	return p[k:], nil
}

// sealID is the binding of an event's content: distinct from segment ids ("seg_…") and memo ids.
func sealID(id string) string { return "event/v1/" + id }

// boundContent cuts c's texts to their caps (keeping their start), so one row's sealed content
// stays within MaxEventContent, and returns its JSON.
func boundContent(c *EventContent) []byte {
	out := EventContent{Summary: clipText(c.Summary, maxSummaryContent), Ledger: clipText(c.Ledger, maxLedgerContent),
		Query: clipText(c.Query, maxShortContent), Error: clipText(c.Error, maxShortContent)}
	for i, x := range c.Excerpts {
		if i == maxExcerpts {
			break
		}
		x.Text = clipText(x.Text, maxExcerptContent)
		x.Segment = clipLabel(x.Segment)
		out.Excerpts = append(out.Excerpts, x)
	}
	b, _ := json.Marshal(out)
	return b
}

// Caps of EventContent's fields; their sum (with JSON's escaping, at worst 6 bytes a byte for
// control characters, which texts rarely hold) is about MaxEventContent.
const (
	maxSummaryContent = 24 << 10
	maxLedgerContent  = 16 << 10
	maxShortContent   = 1 << 10
	maxExcerptContent = 2 << 10
	maxExcerpts       = 10
)

// clipText cuts s to at most n bytes on a UTF-8 boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + " …[cut]" // a rune cut in two is dropped
}

// Append writes evs in one transaction, then trims each tenant it wrote to to MaxPerTenant.
func (l *EventLog) Append(ctx context.Context, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	tx, err := l.s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("archive: events: %w", err)
	}
	defer tx.Rollback()
	tenants := map[string]bool{}
	for i := range evs {
		e := &evs[i]
		if e.Conversation == "" || e.Kind == "" {
			return errors.New("archive: events: conversation and kind are required")
		}
		if len(e.Conversation) > maxMemoConversation || len(e.Owner) > maxOwner {
			return errors.New("archive: events: conversation or owner too long")
		}
		if e.ID == "" {
			e.ID = newEventID()
		}
		e.Tenant = tenantOr(e.Tenant)
		if e.CreatedAt.IsZero() {
			e.CreatedAt = time.Now()
		}
		e.CreatedAt = time.UnixMicro(e.CreatedAt.UnixMicro()).UTC()
		sealed := ""
		if e.Content != nil {
			plain := eventPlain(e, boundContent(e.Content))
			if sealed, err = l.s.sealer.SealArchive(pack(plain), sealID(e.ID), e.Tenant); err != nil {
				return fmt.Errorf("archive: events: seal: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, l.s.q(`INSERT INTO archive_events
			(id, tenant, conversation, owner, kind, created_at, api, route, client, trigger_, outcome, flags,
			 model, item, segment, tokens_before, tokens_after, items, latency_us, bytes, sealed)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`),
			e.ID, e.Tenant, e.Conversation, e.Owner, clipLabel(e.Kind), e.CreatedAt.UnixMicro(),
			clipLabel(e.API), clipLabel(e.Route), clipLabel(e.Client), clipLabel(e.Trigger), clipLabel(e.Outcome),
			clipLabel(e.Flags), clipLabel(e.Model), clipLabel(e.Item), clipLabel(e.Segment),
			int64(e.Before), int64(e.After), int64(e.Items), e.Latency.Microseconds(), int64(len(sealed)), sealed); err != nil {
			return fmt.Errorf("archive: events: %w", err)
		}
		tenants[e.Tenant] = true
	}
	for t := range tenants {
		// The row at position MaxPerTenant, newest first, and everything older go.
		if _, err := tx.ExecContext(ctx, l.s.q(`DELETE FROM archive_events WHERE tenant = ? AND seq <= (
			SELECT seq FROM archive_events WHERE tenant = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`),
			t, t, l.o.MaxPerTenant); err != nil {
			return fmt.Errorf("archive: events: trim: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("archive: events: %w", err)
	}
	return nil
}

const eventCols = `id, conversation, owner, kind, created_at, api, route, client, trigger_, outcome, flags,
	model, item, segment, tokens_before, tokens_after, items, latency_us, bytes, sealed`

func scanEvent(rows *sql.Rows, tenant string) (Event, error) {
	var (
		e                             = Event{Tenant: tenant}
		created, before, after, items int64
		lat, bytes                    int64
	)
	if err := rows.Scan(&e.ID, &e.Conversation, &e.Owner, &e.Kind, &created, &e.API, &e.Route, &e.Client,
		&e.Trigger, &e.Outcome, &e.Flags, &e.Model, &e.Item, &e.Segment, &before, &after, &items, &lat, &bytes, &e.contentB); err != nil {
		return Event{}, err
	}
	e.CreatedAt = time.UnixMicro(created).UTC()
	e.Before, e.After, e.Items, e.Bytes = int(before), int(after), int(items), int(bytes)
	e.Latency = time.Duration(lat) * time.Microsecond
	e.Sealed = e.contentB != ""
	return e, nil
}

// List returns the conversation's events of every owner, oldest first (at most the newest
// 2,000). With content, each row's sealed content is opened into Content; a row that fails to
// open keeps Content nil and is reported by the ErrIntegrity error returned with the rows.
func (l *EventLog) List(ctx context.Context, tenant, conversation string, content bool) ([]Event, error) {
	tenant = tenantOr(tenant)
	rows, err := l.s.db.QueryContext(ctx, l.s.q(`SELECT `+eventCols+` FROM archive_events
		WHERE tenant = ? AND conversation = ? ORDER BY created_at DESC, seq DESC LIMIT ?`), tenant, conversation, maxEventList)
	if err != nil {
		return nil, fmt.Errorf("archive: events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e, err := scanEvent(rows, tenant)
		if err != nil {
			return nil, fmt.Errorf("archive: events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: events: %w", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	var firstErr error
	for i := range out {
		e := &out[i]
		if content && e.contentB != "" {
			c, err := l.open(e)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			e.Content = c
		}
		e.contentB = ""
	}
	return out, firstErr
}

func (l *EventLog) open(e *Event) (*EventContent, error) {
	packed, err := l.s.sealer.OpenArchive(e.contentB, sealID(e.ID), e.Tenant)
	if err != nil {
		return nil, fmt.Errorf("%w: event %s: cannot open: %v", ErrIntegrity, e.ID, err)
	}
	plain, err := unpack(packed)
	if err != nil {
		return nil, fmt.Errorf("%w: event %s: %v", ErrIntegrity, e.ID, err)
	}
	body, err := openEventPlain(plain, e)
	if err != nil {
		return nil, fmt.Errorf("%w: event %s: %v", ErrIntegrity, e.ID, err)
	}
	var c EventContent
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("%w: event %s: %v", ErrIntegrity, e.ID, err)
	}
	return &c, nil
}

// ConversationEvents is one conversation's events summed up, for the console's list.
type ConversationEvents struct {
	Conversation string
	Compactions  int   // successful
	Failures     int   // failed compactions
	TokensSaved  int64 // sum of tokens before − after over successful compactions
	MemoHits     int
	Recalls      int
	Owners       int
	First, Last  time.Time
	APIs         []string // distinct, sorted
	Clients      []string // distinct, sorted
}

// Summaries sums up the tenant's conversations' events (every owner), most recent first. since,
// when not zero, leaves out events before it. At most limit conversations (default 500).
func (l *EventLog) Summaries(ctx context.Context, tenant string, since time.Time, limit int) ([]ConversationEvents, error) {
	tenant = tenantOr(tenant)
	if limit <= 0 || limit > 5_000 {
		limit = 500
	}
	var sinceUS int64
	if !since.IsZero() {
		sinceUS = since.UnixMicro()
	}
	rows, err := l.s.db.QueryContext(ctx, l.s.q(`SELECT conversation,
			SUM(CASE WHEN kind = 'compaction' THEN 1 ELSE 0 END),
			SUM(CASE WHEN kind = 'compaction_failed' THEN 1 ELSE 0 END),
			CAST(SUM(CASE WHEN kind = 'compaction' AND tokens_before > tokens_after THEN tokens_before - tokens_after ELSE 0 END) AS BIGINT),
			SUM(CASE WHEN kind = 'memo_applied' THEN 1 ELSE 0 END),
			SUM(CASE WHEN kind = 'recall' THEN 1 ELSE 0 END),
			COUNT(DISTINCT owner), MIN(created_at), MAX(created_at)
		FROM archive_events WHERE tenant = ? AND created_at >= ?
		GROUP BY conversation ORDER BY MAX(created_at) DESC, conversation LIMIT ?`), tenant, sinceUS, limit)
	if err != nil {
		return nil, fmt.Errorf("archive: events: summaries: %w", err)
	}
	var out []ConversationEvents
	idx := map[string]int{}
	for rows.Next() {
		var c ConversationEvents
		var first, last int64
		if err := rows.Scan(&c.Conversation, &c.Compactions, &c.Failures, &c.TokensSaved, &c.MemoHits, &c.Recalls,
			&c.Owners, &first, &last); err != nil {
			rows.Close()
			return nil, fmt.Errorf("archive: events: summaries: %w", err)
		}
		c.First, c.Last = time.UnixMicro(first).UTC(), time.UnixMicro(last).UTC()
		idx[c.Conversation] = len(out)
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: events: summaries: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	// The distinct APIs and clients of each: one row per (conversation, api, client).
	labels, err := l.s.db.QueryContext(ctx, l.s.q(`SELECT DISTINCT conversation, api, client FROM archive_events
		WHERE tenant = ? AND created_at >= ? ORDER BY conversation, api, client LIMIT ?`), tenant, sinceUS, 20*limit)
	if err != nil {
		return nil, fmt.Errorf("archive: events: summaries: %w", err)
	}
	defer labels.Close()
	for labels.Next() {
		var conv, api, client string
		if err := labels.Scan(&conv, &api, &client); err != nil {
			return nil, fmt.Errorf("archive: events: summaries: %w", err)
		}
		i, ok := idx[conv]
		if !ok {
			continue
		}
		c := &out[i]
		if api != "" && !slices.Contains(c.APIs, api) {
			c.APIs = append(c.APIs, api)
		}
		if client != "" && !slices.Contains(c.Clients, client) {
			c.Clients = append(c.Clients, client)
		}
	}
	for i := range out {
		slices.Sort(out[i].APIs)
		slices.Sort(out[i].Clients)
	}
	return out, labels.Err()
}

// Tenants lists the tenants that have segments or events, sorted.
func (l *EventLog) Tenants(ctx context.Context) ([]string, error) {
	rows, err := l.s.db.QueryContext(ctx, `SELECT tenant FROM archive_segments UNION SELECT tenant FROM archive_events ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("archive: tenants: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("archive: tenants: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// eventsSchema is migration 5 of both backends (the types are the same words in both: INTEGER
// is 64-bit in SQLite, BIGINT in PostgreSQL, so each backend gets its own copy of the table).
func eventsSchema(seq, integer string) []string {
	return []string{
		`CREATE TABLE archive_events (
			seq           ` + seq + `,
			id            TEXT    NOT NULL,
			tenant        TEXT    NOT NULL,
			conversation  TEXT    NOT NULL,
			owner         TEXT    NOT NULL DEFAULT '',
			kind          TEXT    NOT NULL,
			created_at    ` + integer + ` NOT NULL, -- unix microseconds
			api           TEXT    NOT NULL DEFAULT '',
			route         TEXT    NOT NULL DEFAULT '',
			client        TEXT    NOT NULL DEFAULT '',
			trigger_      TEXT    NOT NULL DEFAULT '',
			outcome       TEXT    NOT NULL DEFAULT '',
			flags         TEXT    NOT NULL DEFAULT '',
			model         TEXT    NOT NULL DEFAULT '',
			item          TEXT    NOT NULL DEFAULT '',
			segment       TEXT    NOT NULL DEFAULT '',
			tokens_before ` + integer + ` NOT NULL DEFAULT 0,
			tokens_after  ` + integer + ` NOT NULL DEFAULT 0,
			items         ` + integer + ` NOT NULL DEFAULT 0,
			latency_us    ` + integer + ` NOT NULL DEFAULT 0,
			bytes         ` + integer + ` NOT NULL DEFAULT 0, -- sealed size
			sealed        TEXT    NOT NULL DEFAULT '',
			UNIQUE (tenant, id)
		)`,
		`CREATE INDEX archive_events_conversation ON archive_events (tenant, conversation, created_at)`,
		`CREATE INDEX archive_events_tenant_seq ON archive_events (tenant, seq)`,
		`CREATE INDEX archive_events_created ON archive_events (created_at)`,
	}
}
