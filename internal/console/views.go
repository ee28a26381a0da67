package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/dialect"
)

// page is what every template gets; Data is the view's own.
type page struct {
	Title   string
	Section string // conversations, search, live: the nav item shown as current
	Session *session
	Content bool // --console-content
	Tenant  string
	Tenants []string
	Error   string
	Flash   string
	Next    string
	Data    any
}

func (c *console) page(r *http.Request, s *session, title, section, tenant string) page {
	p := page{Title: title, Section: section, Session: s, Content: c.o.Content, Tenant: tenant}
	if s != nil {
		p.Tenants = c.tenants(r)
		if tenant != "" && !slices.Contains(p.Tenants, tenant) {
			p.Tenants = append(p.Tenants, tenant)
		}
	}
	return p
}

// tenantsTTL is how long the tenant picker's list is reused: listing the archive's tenants reads
// an index of every segment, which is not worth doing on every page.
const tenantsTTL = 30 * time.Second

func (c *console) tenants(r *http.Request) []string {
	c.tenantsMu.Lock()
	defer c.tenantsMu.Unlock()
	if now := c.o.Now(); c.tenantsList == nil || now.Sub(c.tenantsAt) > tenantsTTL {
		c.tenantsList, c.tenantsAt = c.b.Tenants(r.Context()), now
	}
	return slices.Clone(c.tenantsList)
}

func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		c.log.Warn("console: template", "template", name, "err", err)
		http.Error(w, "the console could not render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *console) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	p := c.page(r, s, http.StatusText(status), "", "")
	p.Error = msg
	c.render(w, r, status, "error", p)
}

// Bounds on what a request may name: ids and tenants are short printable labels.
const (
	maxLabel  = 256
	maxQuery  = 512
	listLimit = 500
)

func cleanLabel(s string) (string, bool) {
	if len(s) > maxLabel {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return "", false
		}
	}
	return s, true
}

// tenant is the tenant a request names, or the default.
func (c *console) tenant(r *http.Request) (string, bool) {
	t, ok := cleanLabel(r.URL.Query().Get("tenant"))
	if !ok {
		return "", false
	}
	if t == "" {
		t = c.b.DefaultTenant()
	}
	return t, true
}

// --- conversations ------------------------------------------------------------------------

type convRow struct {
	ID                        string
	Segments                  int
	Bytes                     int64
	Compactions, Failures     int
	TokensSaved               int64
	MemoHits, Recalls, Owners int
	Last                      time.Time
	APIs, Clients             []string
}

type convList struct {
	Rows                  []convRow
	Client, API, Since    string
	Clients, APIs, Sinces []string
	Total                 int
	Truncated             bool
	NoArchive             bool
}

var (
	clientKinds = []string{"codex", "claude_code", "chat_agent", "sdk", "other"}
	apiKinds    = apiNames()
	sinces      = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}
)

// apiNames is the API filter's values: the dialects' names (dialect.All).
func apiNames() []string {
	out := make([]string, len(dialect.All))
	for i, n := range dialect.All {
		out[i] = string(n)
	}
	return out
}

// oldAPINames are the API names of event rows written before the dialects had one name
// (internal/dialect). The log keeps its rows for weeks, so the console reads them as the
// dialect they name.
var oldAPINames = map[string]dialect.Name{"openai": dialect.Responses, "anthropic": dialect.Messages}

// apiName is an event row's API as the console names it.
func apiName(api string) string {
	if n, ok := oldAPINames[api]; ok {
		return string(n)
	}
	return api
}

// apiNamesOf is a conversation's distinct APIs, sorted, with old names read as apiName does.
func apiNamesOf(apis []string) []string {
	out := make([]string, 0, len(apis))
	for _, a := range apis {
		if n := apiName(a); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (c *console) conversations(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenant(r)
	if !ok {
		c.errorPage(w, r, s, http.StatusBadRequest, "That tenant name is not valid.")
		return
	}
	q := r.URL.Query()
	l := convList{Client: q.Get("client"), API: q.Get("api"), Since: q.Get("since"),
		Clients: clientKinds, APIs: apiKinds, Sinces: []string{"1h", "24h", "7d", "30d"}}
	if !slices.Contains(clientKinds, l.Client) {
		l.Client = ""
	}
	if !slices.Contains(apiKinds, l.API) {
		l.API = ""
	}
	var since time.Time
	if d, ok := sinces[l.Since]; ok {
		since = c.o.Now().Add(-d)
	} else {
		l.Since = ""
	}
	rows := map[string]*convRow{}
	if st := c.b.Archive(); st != nil {
		infos, err := st.Conversations(r.Context(), tenant)
		if err != nil {
			c.log.Warn("console: conversations", "err", err)
			c.errorPage(w, r, s, http.StatusInternalServerError, "The archive could not be read.")
			return
		}
		for _, in := range infos {
			rows[in.ID] = &convRow{ID: in.ID, Segments: in.Segments, Bytes: in.Bytes, Last: in.Last}
		}
	} else {
		l.NoArchive = true
	}
	if ev := c.b.Events(); ev != nil {
		sums, err := ev.Summaries(r.Context(), tenant, time.Time{}, 5_000)
		if err != nil {
			c.log.Warn("console: event summaries", "err", err)
		}
		for _, e := range sums {
			row := rows[e.Conversation]
			if row == nil {
				row = &convRow{ID: e.Conversation}
				rows[e.Conversation] = row
			}
			row.Compactions, row.Failures, row.TokensSaved = e.Compactions, e.Failures, e.TokensSaved
			row.MemoHits, row.Recalls, row.Owners, row.APIs, row.Clients = e.MemoHits, e.Recalls, e.Owners, apiNamesOf(e.APIs), e.Clients
			if e.Last.After(row.Last) {
				row.Last = e.Last
			}
		}
	}
	for _, row := range rows {
		if l.Client != "" && !slices.Contains(row.Clients, l.Client) ||
			l.API != "" && !slices.Contains(row.APIs, l.API) || !since.IsZero() && row.Last.Before(since) {
			continue
		}
		l.Rows = append(l.Rows, *row)
	}
	slices.SortFunc(l.Rows, func(a, b convRow) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	l.Total = len(l.Rows)
	if len(l.Rows) > listLimit {
		l.Rows, l.Truncated = l.Rows[:listLimit], true
	}
	p := c.page(r, s, "Conversations", "conversations", tenant)
	if d := q.Get("deleted"); d != "" {
		p.Flash = fmt.Sprintf("Deleted conversation %q (%s archived segments).", d, q.Get("segments"))
	}
	p.Data = l
	c.render(w, r, http.StatusOK, "conversations", p)
}

// --- a conversation's timeline -------------------------------------------------------------

type timeline struct {
	ID                             string
	Events                         []eventView
	Compactions, Failures, Recalls int
	MemoHits                       int
	TokensSaved                    int64
	Owners                         []string
	Chart                          *chart
	Truncated                      bool
}

type eventView struct {
	archive.Event
	Label    string // the trigger in the console's words
	Handoff  *handoffView
	Replaced *replacedView
	Saved    int
}

type handoffView struct {
	Summary, Ledger, Gap string
}

type replacedView struct {
	Segment  string
	Items    []string
	More     int
	Facts    []fact
	Kept     int // facts the summary kept
	InLedger int
	Lost     int
	Err      string
}

// triggerLabels say in the console's words what started a compaction.
var triggerLabels = map[string]string{
	"threshold":          "threshold (client's context_management)",
	"policy":             "policy (transparent: the operator's --compact-threshold)",
	"compact_endpoint":   "explicit (/v1/responses/compact)",
	"compaction_trigger": "explicit (compaction_trigger item)",
	"on_demand":          "explicit (Messages on-demand)",
	"agent":              "agent (its own compaction, answered by compactd)",
}

// named reads the tenant and the conversation id a page is about from its query; when either is
// missing or not a label, it answers a 400 page saying what to name, and ok is false.
func (c *console) named(w http.ResponseWriter, r *http.Request, s *session, what string) (tenant, id string, ok bool) {
	tenant, ok = c.tenant(r)
	id, ok2 := cleanLabel(r.URL.Query().Get("id"))
	if !ok || !ok2 || id == "" {
		c.errorPage(w, r, s, http.StatusBadRequest, what)
		return "", "", false
	}
	return tenant, id, true
}

func (c *console) conversation(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, id, ok := c.named(w, r, s, "Name a conversation (id) and, optionally, its tenant.")
	if !ok {
		return
	}
	tl := timeline{ID: id}
	ev := c.b.Events()
	if ev != nil {
		evs, err := ev.List(r.Context(), tenant, id, c.o.Content)
		if err != nil && !errors.Is(err, archive.ErrIntegrity) {
			c.log.Warn("console: events", "err", err)
			c.errorPage(w, r, s, http.StatusInternalServerError, "The event log could not be read.")
			return
		}
		if err != nil {
			c.log.Warn("console: an event's content did not open", "tenant", tenant, "conversation", id, "err", err)
		}
		owners := map[string]bool{}
		var before, after []float64
		for _, e := range evs {
			e.API = apiName(e.API)
			v := eventView{Event: e, Label: triggerLabels[e.Trigger]}
			if v.Label == "" {
				v.Label = e.Trigger
			}
			if e.Owner != "" && !owners[e.Owner] {
				owners[e.Owner] = true
				tl.Owners = append(tl.Owners, e.Owner)
			}
			switch e.Kind {
			case archive.EventCompaction:
				tl.Compactions++
				v.Saved = max(0, e.Before-e.After)
				tl.TokensSaved += int64(v.Saved)
				before, after = append(before, float64(e.Before)), append(after, float64(e.After))
				if c.o.Content {
					v.Handoff, v.Replaced = c.handoff(r, tenant, e)
				}
			case archive.EventCompactionFailed:
				tl.Failures++
			case archive.EventRecall:
				tl.Recalls++
			case archive.EventMemoApplied:
				tl.MemoHits++
			}
			tl.Events = append(tl.Events, v)
		}
		if len(before) > 0 {
			tl.Chart = tokenChart(before, after)
		}
	}
	if c.o.Content && len(tl.Events) > 0 {
		c.audit(r, s, tenant, id, "timeline", "events", len(tl.Events))
	}
	p := c.page(r, s, "Conversation "+id, "conversations", tenant)
	p.Data = tl
	c.render(w, r, http.StatusOK, "conversation", p)
}

// Bounds of what a timeline shows of a replaced segment.
const (
	maxShownItems    = 60
	maxShownItemText = 1500
)

// handoff is what a compaction handed the model, and what it replaced (its archive segment),
// with the facts check.
func (c *console) handoff(r *http.Request, tenant string, e archive.Event) (*handoffView, *replacedView) {
	var h *handoffView
	if e.Content != nil {
		h = &handoffView{Summary: e.Content.Summary}
		h.Ledger, h.Gap = splitGap(e.Content.Ledger)
	}
	if e.Segment == "" || c.b.Archive() == nil {
		return h, nil
	}
	rv := &replacedView{Segment: e.Segment}
	seg, err := c.b.Archive().Get(r.Context(), tenant, e.Segment)
	switch {
	case errors.Is(err, archive.ErrNotFound):
		rv.Err = "This segment is no longer in the archive (pruned by retention)."
		return h, rv
	case err != nil:
		c.log.Warn("console: segment", "segment", e.Segment, "err", err)
		rv.Err = "This segment could not be read from the archive."
		return h, rv
	}
	for i, it := range seg.Items {
		if i == maxShownItems {
			rv.More = len(seg.Items) - i
			break
		}
		rv.Items = append(rv.Items, clip(renderItem(it), maxShownItemText))
	}
	if h != nil {
		rv.Facts = factsCheck(seg.Items, h.Summary, e.Content.Ledger)
		for _, f := range rv.Facts {
			switch f.Found {
			case foundSummary:
				rv.Kept++
			case foundLedger:
				rv.InLedger++
			default:
				rv.Lost++
			}
		}
	}
	return h, rv
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + " …"
}

// --- search --------------------------------------------------------------------------------

type searchView struct {
	Q, Conversation string
	Hits            []archive.Hit
	Searched        bool
	NoArchive       bool
}

func (c *console) search(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := c.tenant(r)
	conv, ok2 := cleanLabel(r.URL.Query().Get("conversation"))
	q := r.URL.Query().Get("q")
	if !ok || !ok2 || len(q) > maxQuery {
		c.errorPage(w, r, s, http.StatusBadRequest, "The query, tenant or conversation is too long or not valid.")
		return
	}
	v := searchView{Q: q, Conversation: conv}
	p := c.page(r, s, "Search", "search", tenant)
	st := c.b.Archive()
	switch {
	case st == nil:
		v.NoArchive = true
	case strings.TrimSpace(q) != "":
		v.Searched = true
		hits, err := st.Search(r.Context(), archive.Query{Text: q, Tenant: tenant, Conversation: conv, Limit: 20, ExcerptBytes: c.b.ExcerptBytes()})
		switch {
		case errors.Is(err, archive.ErrEmptyQuery):
			p.Error = "The query has no word to search for: the archive is searched by words (letters and digits, with _ . / - : inside a word); there are no operators or wildcards."
		case err != nil:
			c.log.Warn("console: search", "err", err)
			p.Error = "The archive could not be searched."
		default:
			v.Hits = hits
			if c.o.Content && len(hits) > 0 {
				c.audit(r, s, tenant, conv, "search", "hits", len(hits))
			}
		}
	}
	p.Data = v
	c.render(w, r, http.StatusOK, "search", p)
}

// --- delete --------------------------------------------------------------------------------

type deleteView struct {
	ID               string
	Segments, Events int
}

func (c *console) deleteForm(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, id, ok := c.named(w, r, s, "Name the conversation to delete.")
	if !ok {
		return
	}
	v := deleteView{ID: id}
	if st := c.b.Archive(); st != nil {
		if infos, err := st.Conversations(r.Context(), tenant); err == nil {
			for _, in := range infos {
				if in.ID == id {
					v.Segments = in.Segments
				}
			}
		}
	}
	if ev := c.b.Events(); ev != nil {
		if evs, err := ev.List(r.Context(), tenant, id, false); err == nil {
			v.Events = len(evs)
		}
	}
	p := c.page(r, s, "Delete "+id, "conversations", tenant)
	p.Data = v
	c.render(w, r, http.StatusOK, "delete", p)
}

func (c *console) deleteConversation(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, ok := cleanLabel(r.PostFormValue("tenant"))
	id, ok2 := cleanLabel(r.PostFormValue("id"))
	if !ok || !ok2 || id == "" || r.PostFormValue("confirm") != "delete" {
		c.errorPage(w, r, s, http.StatusBadRequest, "Deleting needs the conversation and the confirmation.")
		return
	}
	if tenant == "" {
		tenant = c.b.DefaultTenant()
	}
	n, err := c.b.Delete(r.Context(), tenant, id)
	if err != nil {
		c.errorPage(w, r, s, http.StatusInternalServerError, "The conversation could not be deleted: "+err.Error())
		return
	}
	c.log.Info("console: conversation deleted", "tenant", tenant, "conversation", id, "segments", n, "session", sessionHash(s.id))
	u := "/console/conversations?tenant=" + urlQuery(tenant) + "&deleted=" + urlQuery(id) + "&segments=" + strconv.Itoa(n)
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// --- live ----------------------------------------------------------------------------------

type liveView struct {
	Live
	LatencyChart, CompactingChart, BudgetChart *chart
	MemoRate, SpecRate                         string
	P50, P95, Max                              time.Duration
	BudgetShare                                string
}

func (c *console) liveView() liveView {
	l := c.b.Live()
	v := liveView{Live: l, MemoRate: rate(l.MemoHits, l.MemoMisses), SpecRate: rate(l.SpeculativeHits, l.SpeculativeMisses)}
	v.LatencyChart = latencyChart(l.Latency)
	v.P50, v.P95, v.Max = percentiles(l.Latency)
	v.CompactingChart, v.BudgetChart = historyCharts(l)
	if l.BodyLimit > 0 {
		v.BudgetShare = fmt.Sprintf("%.1f%%", 100*float64(l.BodyBytes)/float64(l.BodyLimit))
	}
	return v
}

func rate(hits, misses int64) string {
	if hits+misses == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(hits)/float64(hits+misses))
}

func (c *console) live(w http.ResponseWriter, r *http.Request, s *session) {
	p := c.page(r, s, "Live", "live", "")
	p.Data = c.liveView()
	c.render(w, r, http.StatusOK, "live", p)
}

// liveJSON is what the live page's script fetches every few seconds: the panel, rendered here
// like the page, and the figures.
func (c *console) liveJSON(w http.ResponseWriter, r *http.Request, s *session) {
	v := c.liveView()
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, "livepanel", v); err != nil {
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"html": buf.String(), "time": v.Time,
		"compacting": v.Live.Compacting, "breaker": v.Breaker})
}

// --- template helpers ----------------------------------------------------------------------

var funcs = template.FuncMap{
	"short": func(s string) string {
		if len(s) > 10 {
			return s[:10]
		}
		return s
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"num": func(n any) string {
		s := strconv.FormatInt(asInt64(n), 10)
		for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	},
	"bytes": func(n any) string {
		v := asInt64(n)
		switch {
		case v >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
		case v >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(v)/(1<<10))
		}
		return fmt.Sprintf("%d B", v)
	},
	"ms": func(d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		if d < time.Second {
			return fmt.Sprintf("%d ms", d.Milliseconds())
		}
		return fmt.Sprintf("%.1f s", d.Seconds())
	},
	"join": strings.Join,
	"q":    urlQuery,
}

func urlQuery(s string) string { return template.URLQueryEscaper(s) }

// asInt64 is a template argument of either integer type the views hold (int, int64) as an
// int64; anything else is 0.
func asInt64(n any) int64 {
	switch x := n.(type) {
	case int:
		return int64(x)
	case int64:
		return x
	}
	return 0
}
