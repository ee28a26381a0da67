// Package mcpserver is `compactd mcp`: recall for any agent, as an MCP server over stdio. Its
// tools search this project's past sessions (the sessions index shared with `compactd sessions`),
// recall verbatim excerpts from the compaction archive, and produce a resume prompt.
//
// It is built on the official Go MCP SDK (github.com/modelcontextprotocol/go-sdk): the protocol
// (initialisation, capability negotiation, tool schemas from Go types, cancellation) is the
// SDK's, maintained with the spec, rather than hand-written JSON-RPC.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactd/compactd/internal/agenthooks"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/session"
)

// Options configures the server.
type Options struct {
	Store  archive.Store
	Tenant string // archive.DefaultTenant when empty
	// SessionDirs hold this project's session logs (*.jsonl, searched recursively).
	SessionDirs []string
	// SharedSessionDirs hold many projects' logs (Codex's sessions tree); only those whose
	// recorded working directory is Project or inside it are this project's.
	SharedSessionDirs []string
	Project           string
	// StatePath keeps the incremental index state (which logs are indexed at which size);
	// in memory only when empty.
	StatePath string
	// Conversation is the compaction archive conversation recall searches when the caller
	// names none: the current session (compactd's proxy archives an agent's compactions under
	// the agent's session id). When it has nothing matching, recall says so and answers from
	// the whole archive. All compaction segments of the tenant when empty.
	Conversation string
	Version      string
}

// Tool names.
const (
	ToolSearch = "search_sessions"
	ToolRecall = "recall"
	ToolResume = "resume_prompt"
)

// Bounds on answers: a tool result lands in the model's context.
const (
	maxResults      = 20
	excerptBytes    = 600
	maxResumeChars  = 20000
	defaultResults  = 5
	recallExcerptsB = 1200
)

// SearchArgs are search_sessions' arguments.
type SearchArgs struct {
	Query string `json:"query" jsonschema:"words to look for in earlier sessions of this project (file names, error text, values)"`
	Limit int    `json:"limit,omitempty" jsonschema:"number of sessions to return (default 5, at most 20)"`
}

// RecallArgs are recall's arguments.
type RecallArgs struct {
	Query        string `json:"query" jsonschema:"words to look for in what this session's compactions replaced"`
	Conversation string `json:"conversation,omitempty" jsonschema:"compaction archive conversation id (default: the current session)"`
	Limit        int    `json:"limit,omitempty" jsonschema:"number of excerpts (default 5, at most 20)"`
}

// ResumeArgs are resume_prompt's arguments.
type ResumeArgs struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"session to resume (default: the most recent session log of this project)"`
}

// New returns the MCP server with its three tools.
func New(o Options) *mcp.Server {
	if o.Tenant == "" {
		o.Tenant = archive.DefaultTenant
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "compactd", Version: o.Version}, nil)
	ix := &Indexer{Store: o.Store, Tenant: o.Tenant, Dirs: o.SessionDirs, StatePath: o.StatePath, SharedDirs: o.SharedSessionDirs, Project: o.Project}
	mcp.AddTool(s, &mcp.Tool{Name: ToolSearch, Description: "Search this project's earlier agent sessions (user messages, tool calls and their outputs, verbatim). Use it for facts an earlier session or a compaction may have lost."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a SearchArgs) (*mcp.CallToolResult, any, error) {
			if strings.TrimSpace(a.Query) == "" {
				return errResult("query is empty"), nil, nil
			}
			if _, err := ix.Refresh(ctx); err != nil {
				return errResult("indexing the session logs failed: " + err.Error()), nil, nil
			}
			hits, err := o.Store.Search(ctx, archive.Query{Text: a.Query, Tenant: o.Tenant, Kind: archive.KindSession, Limit: limit(a.Limit), ExcerptBytes: excerptBytes})
			if err != nil {
				return searchErr(err), nil, nil
			}
			if len(hits) == 0 {
				return text(fmt.Sprintf("No earlier session of this project matches %q.", a.Query)), nil, nil
			}
			var b strings.Builder
			for _, h := range hits {
				fmt.Fprintf(&b, "session %s (%s)\n%s\n\n", strings.TrimPrefix(h.Conversation, SessionConvPrefix), h.CreatedAt.UTC().Format(time.RFC3339), h.Excerpt)
			}
			return text(b.String()), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolRecall, Description: "Recall verbatim excerpts of what this session's compactions replaced (the compaction archive), by words."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a RecallArgs) (*mcp.CallToolResult, any, error) {
			if strings.TrimSpace(a.Query) == "" {
				return errResult("query is empty"), nil, nil
			}
			conv, defaulted := a.Conversation, false
			if conv == "" && o.Conversation != "" {
				conv, defaulted = o.Conversation, true
			}
			q := archive.Query{Text: a.Query, Tenant: o.Tenant, Conversation: conv, Kind: archive.KindCompaction, Limit: limit(a.Limit), ExcerptBytes: recallExcerptsB}
			hits, err := o.Store.Search(ctx, q)
			if err != nil {
				return searchErr(err), nil, nil
			}
			var b strings.Builder
			if len(hits) == 0 && defaulted {
				// The current session has nothing archived that matches (it may never have
				// been compacted by compactd): the rest of the archive may.
				q.Conversation = ""
				if hits, err = o.Store.Search(ctx, q); err != nil {
					return searchErr(err), nil, nil
				}
				if len(hits) > 0 {
					fmt.Fprintf(&b, "Nothing archived for this session (%s) matches %q; from other conversations:\n\n", conv, a.Query)
				}
			}
			if len(hits) == 0 {
				return text(fmt.Sprintf("Nothing archived matches %q.", a.Query)), nil, nil
			}
			for _, h := range hits {
				fmt.Fprintf(&b, "[%s, segment %s, item %d]\n%s\n\n", h.Conversation, h.SegmentID, h.ItemIndex, h.Excerpt)
			}
			return text(b.String()), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolResume, Description: "Produce a resume prompt for this project's most recent session (or a named one): what the user asked, files modified, commands and failures, the plan, and a facts ledger from tool outputs."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a ResumeArgs) (*mcp.CallToolResult, any, error) {
			path, err := findSession(o.SessionDirs, o.SharedSessionDirs, o.Project, a.SessionID)
			if err != nil {
				return errResult(err.Error()), nil, nil
			}
			md, err := resumePrompt(path)
			if err != nil {
				return errResult(err.Error()), nil, nil
			}
			return text(agenthooks.Bound(md, maxResumeChars)), nil, nil
		})
	return s
}

func limit(n int) int {
	if n <= 0 {
		return defaultResults
	}
	return min(n, maxResults)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func errResult(s string) *mcp.CallToolResult {
	r := text(s)
	r.IsError = true
	return r
}

func searchErr(err error) *mcp.CallToolResult {
	if errors.Is(err, archive.ErrEmptyQuery) {
		return errResult("the query has no searchable words")
	}
	return errResult("search failed: " + err.Error())
}

// findSession picks the session log: the one whose file name or parsed id is id, else the most
// recently modified log.
func findSession(dirs, shared []string, project, id string) (string, error) {
	type cand struct {
		path   string
		mod    time.Time
		shared bool
	}
	var cs []cand
	for i, d := range append(append([]string{}, dirs...), shared...) {
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() || !strings.HasSuffix(p, ".jsonl") {
				return nil
			}
			if info, err := de.Info(); err == nil && info.Mode().IsRegular() {
				cs = append(cs, cand{p, info.ModTime(), i >= len(dirs)})
			}
			return nil
		})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].mod.After(cs[j].mod) })
	for _, c := range cs {
		if (id == "" || strings.Contains(filepath.Base(c.path), id)) && (!c.shared || InProject(c.path, project)) {
			return c.path, nil
		}
	}
	if id != "" {
		return "", fmt.Errorf("no session log of this project is named after %q", id)
	}
	return "", errors.New("no session log found for this project")
}

// resumePrompt is the handoff reduction of one log plus its facts ledger.
func resumePrompt(path string) (string, error) {
	r, err := agenthooks.OpenTranscript(path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	s, err := session.ParseSession(r, session.FormatAuto)
	if err != nil {
		return "", err
	}
	s.Path = path
	md := session.Reduce(s).Markdown()
	items := agenthooks.SessionItems(s)
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	if l := compact.Ledger(items, idx, 6000); l != "" {
		md += "\n" + l + "\n"
	}
	return md, nil
}
