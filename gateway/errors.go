package gateway

import (
	"encoding/json"
	"net/http"
)

// apiError is OpenAI's error shape {"error":{"message","type","param","code"}}; the types and
// codes the gateway answers with are package wire's.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// writeError writes an OpenAI-style JSON error. Headers already set on w are kept.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	body, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: msg, Type: typ, Code: code}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
