package core

import (
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
)

// Handler serves one request of a route with its Turn. An error it returns
// is answered in its dialect's error shape (Services.Bind), unless the
// answer has begun: a handler that has written (a stream under way) answers
// its own errors and returns nil.
type Handler func(c *gin.Context, t *Turn) error

// Services is what every dialect's routes need from the server they are
// mounted on (web.Server implements it): a dialect's own Services embeds
// it and adds what that dialect alone uses.
type Services interface {
	// Bind binds a dialect's error answer (its shape and statuses) once:
	// the function it returns adapts that dialect's handlers to Gin, and
	// answers the error a handler returns with fail.
	Bind(fail func(c *gin.Context, err error)) func(Handler) gin.HandlerFunc
	// Decode reads the request body into v within the server's limits.
	Decode(c *gin.Context, v any) error
	// CheckItems fails, with a 400 naming the limit, when a request's
	// param holds more than the server's items per request (--max-items).
	CheckItems(param string, n int) error
	// RunTurn runs req on t's backend and answers as w says.
	RunTurn(c *gin.Context, t *Turn, req engine.Request, w Wire)
	// SelectBackend records in t the backend serving model ("" the
	// first), or fails with engine.ErrUnknownModel.
	SelectBackend(t *Turn, model string) (engine.Backend, engine.Info, error)
}

// ChatServices is what the chat dialects (OpenAI's and Ollama's routes)
// need beyond Services: windowed chats, embeddings and the model list.
type ChatServices interface {
	Services
	// ApplyWindow windows a chat's messages and records its conversation.
	ApplyWindow(c *gin.Context, t *Turn, promptCacheKey string, req *engine.Request) error
	// Embed computes inputs' embeddings on the backend serving model,
	// once check accepts its model.
	Embed(c *gin.Context, t *Turn, model string, inputs []string, check func(engine.Info) error) (engine.Embeddings, engine.Info, error)
	// Backend is the server's own backend (a Catalog or one model).
	Backend() engine.Backend
	// Started is when the server started (the models' "created");
	// Now is the server's clock, fixed in tests so that bodies can be
	// compared byte for byte.
	Started() time.Time
	Now() time.Time
}
