package ollama

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	oapi "github.com/ollama/ollama/api"
	ofmt "github.com/ollama/ollama/format"
	"github.com/ollama/ollama/template"
	"github.com/ollama/ollama/types/model"

	"kvwin/engine"
	"kvwin/engine/catalog"
	"kvwin/web/core"
)

// forever is the expiry /api/ps reports: kvwin never unloads its model
// (Ollama's keep_alive -1 shows the same way: "Forever").
var forever = time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC)

// card is the served model's card, or one made of Info alone for a backend
// that cannot describe its file (a gateway).
func (s *server) card() engine.ModelCard { return s.cardOfBackend(s.Backend()) }

// cardOf is the card of a catalog's model: its backend's, if it can
// describe its file without loading it.
func (s *server) cardOf(m core.ModelStatus) engine.ModelCard {
	if cat, ok := s.Backend().(core.Catalog); ok {
		if b, err := cat.Select(m.Name); err == nil {
			return s.cardOfBackend(b)
		}
	}
	return engine.ModelCard{ModifiedAt: s.Started()}
}

// cardOfBackend is b's card, or one made of Info alone.
func (s *server) cardOfBackend(b engine.Backend) engine.ModelCard {
	if d, ok := engine.As[engine.ModelDescriber](b); ok {
		card, err := d.Describe()
		if err == nil {
			return card
		}
		s.Log().Warn("cannot describe the model", "err", err)
	}
	return engine.ModelCard{ModifiedAt: s.Started()}
}

// ollamaDigest names the model as Ollama's digest does: 64 hex digits the
// CLI shortens to 12. Ollama's is its manifest's; kvwin has none, so it is
// a hash of the model id, its file's size and modification time: it
// changes when the served model does.
func ollamaDigest(info engine.Info, card engine.ModelCard) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", info.Model, card.Size, card.ModifiedAt.UnixNano()))
	return hex.EncodeToString(h[:])
}

// ollamaDetails are the model's details in Ollama's words.
func ollamaDetails(card engine.ModelCard) oapi.ModelDetails {
	d := oapi.ModelDetails{Format: card.Format, Family: card.Family, QuantizationLevel: card.Quantization, Families: []string{}}
	if card.Family != "" {
		d.Families = []string{card.Family}
	}
	if card.ParameterCount > 0 {
		d.ParameterSize = ofmt.HumanNumber(card.ParameterCount)
	}
	return d
}

// ollamaTags serves GET /api/tags: the served model, under kvwin's model id
// in both name and model.
func (s *server) ollamaTags(c *gin.Context) {
	if cat, ok := s.Backend().(core.Catalog); ok {
		list := oapi.ListResponse{Models: []oapi.ListModelResponse{}}
		for _, m := range cat.Models() {
			card := s.cardOf(m)
			list.Models = append(list.Models, oapi.ListModelResponse{Name: m.Name, Model: m.Name, ModifiedAt: card.ModifiedAt,
				Size: card.Size, Digest: ollamaDigest(m.Info, card), Details: ollamaDetails(card)})
		}
		core.WriteJSON(c.Writer, http.StatusOK, list)
		return
	}
	info, card := s.Backend().Info(), s.card()
	core.WriteJSON(c.Writer, http.StatusOK, oapi.ListResponse{Models: []oapi.ListModelResponse{{
		Name: info.Model, Model: info.Model, ModifiedAt: card.ModifiedAt, Size: card.Size,
		Digest: ollamaDigest(info, card), Details: ollamaDetails(card),
	}}})
}

// ollamaPS serves GET /api/ps: every loaded model, which is the served one
// (always loaded, never expiring; on the CPU, so size_vram is 0).
func (s *server) ollamaPS(c *gin.Context) {
	if cat, ok := s.Backend().(core.Catalog); ok {
		ps := oapi.ProcessResponse{Models: []oapi.ProcessModelResponse{}}
		for _, m := range cat.Models() {
			if m.State != catalog.Loaded && m.State != catalog.Remote {
				continue
			}
			card, expires := s.cardOf(m), m.ExpiresAt
			if expires.IsZero() {
				expires = forever
			}
			ps.Models = append(ps.Models, oapi.ProcessModelResponse{Name: m.Name, Model: m.Name, Size: card.Size,
				Digest: ollamaDigest(m.Info, card), Details: ollamaDetails(card), ExpiresAt: expires})
		}
		core.WriteJSON(c.Writer, http.StatusOK, ps)
		return
	}
	info, card := s.Backend().Info(), s.card()
	core.WriteJSON(c.Writer, http.StatusOK, oapi.ProcessResponse{Models: []oapi.ProcessModelResponse{{
		Name: info.Model, Model: info.Model, Size: card.Size, Digest: ollamaDigest(info, card),
		Details: ollamaDetails(card), ExpiresAt: forever,
	}}})
}

// ollamaShow serves POST /api/show: details, the GGUF's metadata as
// model_info, the template and parameters. The template is the Ollama Go
// template Ollama itself picks for the file's chat template (its closest
// known template), so a client that renders it gets what Ollama would.
func (s *server) ollamaShow(c *gin.Context, t *core.Turn) error {
	var body oapi.ShowRequest
	if err := s.Decode(c, &body); err != nil {
		return err
	}
	b, info, err := s.ollamaServes(t, firstNonEmpty(body.Model, body.Name)) // Name: deprecated, older clients send it
	if err != nil {
		return err
	}
	card := s.cardOfBackend(b)
	tmpl := "{{ .Prompt }}"
	var params strings.Builder
	if info.ContextSlot > 0 {
		fmt.Fprintf(&params, "num_ctx %d\n", info.ContextSlot)
	}
	if card.ChatTemplate != "" {
		if named, err := template.Named(card.ChatTemplate); err == nil {
			tmpl = string(named.Bytes)
			if named.Parameters != nil {
				for _, stop := range named.Parameters.Stop {
					fmt.Fprintf(&params, "stop %q\n", stop)
				}
			}
		}
	}
	core.WriteJSON(c.Writer, http.StatusOK, oapi.ShowResponse{
		Details: ollamaDetails(card), ModelInfo: card.Info, Template: tmpl, Parameters: params.String(),
		Capabilities: ollamaCapabilities, ModifiedAt: card.ModifiedAt,
		Modelfile: modelfile(info.Model, tmpl, params.String()),
	})
	return nil
}

// ollamaCapabilities are what /api/show says every served model can do:
// complete, and call tools, which /api/chat and /v1/chat/completions
// render for any chat model (in its own template or the system message,
// web/toolcall). Not insert (suffix), vision or thinking, which are refused.
var ollamaCapabilities = []model.Capability{model.CapabilityCompletion, model.CapabilityTools}

// modelfile is /api/show's Modelfile: the model, its template and
// parameters in Modelfile syntax.
func modelfile(model, tmpl, params string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# served by kvwin\nFROM %s\nTEMPLATE \"\"\"%s\"\"\"\n", model, tmpl)
	for _, line := range strings.Split(strings.TrimSpace(params), "\n") {
		if line != "" {
			fmt.Fprintf(&b, "PARAMETER %s\n", line)
		}
	}
	return b.String()
}
