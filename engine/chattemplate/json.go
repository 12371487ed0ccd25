package chattemplate

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ardanlabs/jinja"
)

// toolValue converts one tool for the template. JSON text (json.RawMessage)
// keeps its keys in the client's order, so `tool | tojson` writes them as
// transformers does (Python dicts keep insertion order); a decoded Go map
// has no order and renders with sorted keys.
func toolValue(v any) (jinja.Value, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		return jinja.FromGoValue(v), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	out, err := orderedValue(dec)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("tool definition: %w", err)
	}
	return out, nil
}

func orderedValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				key, _ := k.(string)
				v, err := orderedValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := orderedValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", t)
	default:
		return jinja.FromGoValue(tok), nil // string, json.Number, bool, nil
	}
}
