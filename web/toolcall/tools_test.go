package toolcall

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"kvwin/web/core"
)

// A schema only the model reads (tool_choice auto) may use keywords the
// grammar cannot enforce; a schema a forced call is constrained by may not,
// and only the forced tool's counts.
func TestSchemasAreCheckedForTheGrammarOnlyWhenItEnforcesThem(t *testing.T) {
	loose := json.RawMessage(`{"type":"object","properties":{"metadata":{"type":"object","propertyNames":{"pattern":"^[a-z]+$"}}}}`)
	tools := []Tool{
		{Type: "function", Function: Function{Name: "plain", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)}},
		{Type: "function", Function: Function{Name: "loose", Parameters: loose}},
	}
	for _, tc := range []struct {
		name, choice string
		wantParam    string // "" for accepted
	}{
		{"auto", ``, ""},
		{"auto named", `"auto"`, ""},
		{"none", `"none"`, ""},
		{"required", `"required"`, "tools[1].function.parameters.properties.metadata"},
		{"forced loose", `{"type":"function","function":{"name":"loose"}}`, "tools[1].function.parameters.properties.metadata"},
		{"forced plain", `{"type":"function","function":{"name":"plain"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Read(tools, json.RawMessage(tc.choice))
			var in *core.InputError
			switch {
			case tc.wantParam == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantParam != "" && (!errors.As(err, &in) || in.Param() != tc.wantParam || !strings.Contains(err.Error(), `"propertyNames"`)):
				t.Fatalf("error %v, want a 400 at %s naming propertyNames", err, tc.wantParam)
			case tc.wantParam == "" && tc.choice != `"none"` && !strings.Contains(m.System(), `"propertyNames"`):
				t.Errorf("the tools' text lost the schema the model reads:\n%s", m.System())
			}
		})
	}
	// Not a schema at all is refused whatever the choice.
	bad := []Tool{{Type: "function", Function: Function{Name: "f", Parameters: json.RawMessage(`[1]`)}}}
	if _, err := Read(bad, nil); err == nil || !strings.Contains(err.Error(), "must be a JSON Schema object") {
		t.Errorf("parameters [1] under auto: %v, want a 400", err)
	}
}

// A tool read from another API's shape is named in errors where that
// request holds it, not where a chat request would.
func TestErrorsNameTheToolWhereTheRequestHoldsIt(t *testing.T) {
	loose := json.RawMessage(`{"type":"object","properties":{"m":{"type":"object","propertyNames":{"pattern":"^a$"}}}}`)
	for _, tc := range []struct {
		name                string
		tool                Tool
		wantParam, wantText string
	}{
		{"chat schema", Tool{Type: "function", Function: Function{Name: "f", Parameters: loose}}, "tools[0].function.parameters.properties.m", "tools[0].function.parameters.properties.m uses"},
		{"messages schema", Tool{Type: "function", Function: Function{Name: "f", Parameters: loose}, At: Place{Function: "tools[0]", Schema: "tools[0].input_schema"}}, "tools[0].input_schema.properties.m", "tools[0].input_schema.properties.m uses"},
		{"responses name", Tool{Type: "function", At: Place{Function: "tools[0].tools[2]"}}, "tools[0].tools[2].name", "tools[0].tools[2] has no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read([]Tool{tc.tool}, json.RawMessage(`"required"`))
			var in *core.InputError
			if !errors.As(err, &in) || in.Param() != tc.wantParam || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("error %v, want a 400 at %s", err, tc.wantParam)
			}
		})
	}
}

// A schema is the same prompt however it is escaped or spaced; its keys
// keep the order sent (the order the model reads the arguments in), and
// no HTML escape reaches the prompt.
func TestSchemaCanonicalInThePrompt(t *testing.T) {
	schemas := []string{
		`{"type":"object","properties":{"path":{"type":"string","description":"a path — absolute <here>"},"n":{"type":"integer","maximum":1.0}},"required":["path"]}`,
		"{\n  \"type\": \"object\",\n  \"properties\": {\n    \"path\": {\"type\": \"string\", \"description\": \"a path \\u2014 absolute \\u003chere>\"},\n    \"n\": {\"type\": \"integer\", \"maximum\": 1.0}\n  },\n  \"required\": [\"path\"]\n}",
	}
	var prompts []string
	for _, s := range schemas {
		m, err := Read([]Tool{{Type: "function", Function: Function{Name: "f", Description: "d", Parameters: json.RawMessage(s)}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, m.System())
		if defs := m.Defs(); len(defs) != 1 || !strings.Contains(m.System(), string(defs[0].(json.RawMessage))) {
			t.Errorf("the template's tools %s are not the system message's", defs)
		}
	}
	if prompts[0] != prompts[1] {
		t.Errorf("one schema, two prompts:\n%s\n%s", prompts[0], prompts[1])
	}
	if !strings.Contains(prompts[0], `"maximum":1.0`) {
		t.Errorf("a number's text changed: %s", prompts[0])
	}
	if !strings.Contains(prompts[0], `{"type":"object","properties":{"path":{"type":"string","description":"a path — absolute <here>"},"n":`) {
		t.Errorf("the keys' order or the text changed: %s", prompts[0])
	}
}
