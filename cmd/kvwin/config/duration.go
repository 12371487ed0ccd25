package config

import (
	"fmt"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Duration is a time.Duration written as Go spells it ("30s", "720h").
// It decodes itself so that a bad value reports its position (go-yaml's
// own duration decoding does not).
type Duration time.Duration

// UnmarshalYAML decodes a duration string from its node.
func (d *Duration) UnmarshalYAML(n ast.Node) error {
	tok := n.GetToken()
	s, ok := n.(*ast.StringNode)
	if !ok {
		return &Error{Line: tok.Position.Line, Column: tok.Position.Column, Msg: fmt.Sprintf("value %q: want %s", tok.Value, kindDuration)}
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil {
		return &Error{Line: tok.Position.Line, Column: tok.Position.Column, Msg: fmt.Sprintf("value %q: want %s", tok.Value, kindDuration)}
	}
	*d = Duration(v)
	return nil
}

// String spells d as a flag takes it.
func (d Duration) String() string { return time.Duration(d).String() }

const kindDuration = "a duration such as 30s or 720h"
