package evidence

import (
	"encoding/base64"
	"encoding/json"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func jsonEsc(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
