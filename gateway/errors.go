package gateway

import (
	"encoding/json"
	"net/http"
)

// Error types and codes of the gateway's own responses, in OpenAI's error shape
// {"error":{"message","type","param","code"}}.
const (
	typeAuthentication = "authentication_error"
	typeRateLimit      = "rate_limit_exceeded"
	typeStore          = "quota_store_unavailable"
	typeInvalidRequest = "invalid_request_error"
	typePermission     = "permission_error"
	typeUpstream       = "upstream_error"
	typeServer         = "server_error"

	codeInvalidCredentials = "invalid_credentials"
	codeTokenQuota         = "token_quota_exceeded"
	codeStore              = "quota_store_unavailable"
	codeNoRule             = "no_quota_rule"
	codeModelNotAllowed    = "model_not_found"
	codeModelMissing       = "model_required"
	codeBodyTooLarge       = "request_too_large"
	codeInvalidJSON        = "invalid_json"
	codeEstimateTooLarge   = "estimate_exceeds_capacity"
	codeInvalidValue       = "invalid_value"
	codePromptFillsQuota   = "prompt_exceeds_reservation"
	codeSubjectInFlight    = "subject_in_flight_limit"
	codeUpstream           = "provider_unavailable"
	codeUpstreamTimeout    = "provider_timeout"
	codeNotFound           = "not_found"
	codeMethod             = "method_not_allowed"
	codeDraining           = "shutting_down"
)

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
