// Package coretest holds the checks the routes' tests share of what
// package core gives them: a fast body decoder (core.FastDecoder) held to
// encoding/json.
package coretest

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// AsDecoded checks one body against a fast decoder of *T (decode is its
// DecodeFast): a body it refuses leaves the value untouched, and a body it
// takes is valid JSON that encoding/json decodes to the same value.
// Invalid UTF-8 is skipped: decodeBody refuses it before any decoding.
func AsDecoded[T any](t *testing.T, b []byte, decode func(*T, []byte) bool) {
	t.Helper()
	if !utf8.Valid(b) {
		return
	}
	var got, zero T
	if !decode(&got, b) {
		if !reflect.DeepEqual(got, zero) {
			t.Fatalf("%s: refused, and changed the value: %#v", b, got)
		}
		return
	}
	var want T
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: taken, but encoding/json refuses it: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n fast %#v\n want %#v", b, got, want)
	}
}

// Taken checks that decode takes body and gives what encoding/json gives.
func Taken[T any](t *testing.T, body []byte, decode func(*T, []byte) bool) {
	t.Helper()
	var got, want T
	if !decode(&got, body) {
		t.Fatal("the common body was not taken")
	}
	if err := json.Unmarshal(body, &want); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("fast %#v\nwant %#v (%v)", got, want, err)
	}
}
