package requestid

import (
	"context"
	"log/slog"
)

// Key is the attribute a log line carries the request id under.
const Key = "request_id"

// Handler is a slog.Handler that adds the request id of the context a line
// is logged with (Logger.InfoContext, LogAttrs) as the attribute Key, and
// hands the line to the handler it wraps. Lines logged without a context
// carrying an id are passed on unchanged. Safe for concurrent use if the
// wrapped handler is.
type Handler struct {
	next slog.Handler
}

var _ slog.Handler = Handler{}

// NewHandler wraps next.
func NewHandler(next slog.Handler) Handler { return Handler{next: next} }

// Enabled reports whether next logs at level.
func (h Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the id, then passes r to next.
func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if id := From(ctx); id != "" {
		r = r.Clone() // a record's attributes may be shared with other handlers
		r.AddAttrs(slog.String(Key, id))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs wraps next.WithAttrs.
func (h Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return Handler{next: h.next.WithAttrs(attrs)}
}

// WithGroup wraps next.WithGroup. The id of a line logged through a group
// lands inside the group, as every attribute added to its record does.
func (h Handler) WithGroup(name string) slog.Handler {
	return Handler{next: h.next.WithGroup(name)}
}
