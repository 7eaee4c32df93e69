package wrap

import "encoding/json"

// KeyProperties reads one tools/list result page and returns, per tool, the argument wrap
// fills with the call's hash (in the form its schema admits) when it is absent or empty (an idempotency-key-like string
// property of the input schema; tools without one are left out), and the page's nextCursor.
// `effectfence policy init` uses it to say which tools get a key injected.
func KeyProperties(page json.RawMessage) (map[string]string, string, error) {
	tools, next, err := parseTools(page)
	if err != nil {
		return nil, "", err
	}
	out := map[string]string{}
	for name, t := range tools {
		if t.keyProp != "" {
			out[name] = t.keyProp
		}
	}
	return out, next, nil
}
