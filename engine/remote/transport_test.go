package remote

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestNewTransport(t *testing.T) {
	def := http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	if tr.MaxIdleConnsPerHost != 64 {
		t.Errorf("MaxIdleConnsPerHost = %d, want 64", tr.MaxIdleConnsPerHost)
	}
	if got := http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost; got != def {
		t.Errorf("the default transport changed: %d, was %d", got, def)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d through the transport, want 204", resp.StatusCode)
	}
}
