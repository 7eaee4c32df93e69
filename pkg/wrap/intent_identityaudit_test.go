package wrap

import "testing"

// TestIntentsAreTheOnesTheyAlwaysWere pins the intent (and so the injected idempotency key, the
// intent's hash) and the fingerprint of ordinary wrap calls. A ledger's receipts, and the
// calls it fences as unknown, are found by intent: a change here gives every call a new intent
// after an upgrade, so a retry of a call made before it runs again, and a call left unknown is
// no longer fenced (docs/identity.md: the same configuration keeps its receipts across
// restarts; numbers a JSON encoder writes from a double are byte for byte RFC 8785, "so
// fingerprints of ordinary calls are unchanged"). The values are those of the first build
// with scopes (6e2e5cd, 2026-11-30), and of every build since.
func TestIntentsAreTheOnesTheyAlwaysWere(t *testing.T) {
	for _, c := range []struct {
		tool, args  string
		ignore, key []Path
		intent, fp  string
	}{
		{tool: "charge", args: `{"amount":4900,"currency":"usd"}`,
			intent: "wrap:charge:289c5b639c0cea9e67d2f39de9b496b8f112ef0c7cbeee96b31c11955a296622", fp: "aa2a588fb4a3b67885d527693fc865ba3198c1e894d228db282bc253c2f253cb"},
		{tool: "charge", args: `{ "rate":1e-7, "big":1E21, "amount":1.50, "neg":-0.25, "n":-0 }`,
			intent: "wrap:charge:1b964092609703ac817599289d244f7a6efcb5231ff88f78da24f02c4ab21bc9", fp: "bfa586c21ad47af34c6bed7357ccf30673d9d255f774ed985f34ce2d9ca18864"},
		{tool: "create_entities", args: `{"b":[1,{"z":"\u00e9","a":null,"y":true}],"a":"x\ny","é":"\ud83d\ude00"}`,
			intent: "wrap:create_entities:ae86c8158df3d412775b26eea17e558c69c5e6f1c4f9d55f6973725a6685c8cf", fp: "507d148e7c42693b6523d52019f5f87cd38f5b52b784e78b51de079a190a096d"},
		{tool: "charge", args: `{"amount":5,"meta":{"ts":1,"who":"a"}}`, ignore: []Path{{"meta", "ts"}},
			intent: "wrap:charge:e31a4acd90f0da6dd4134112b8be6ad937e9d9e64259f970efac07aef26ff4fb", fp: "ee6498ca49cea6f66e15e75a3e099fab33c0af28a32c31aa689ddc8f134d9216"},
		{tool: "charge", args: `{"order":"o1","amount":5}`, key: []Path{{"order"}},
			intent: "wrap:charge:14ee1874b7717bcf8f9cf159e825f7c3fbc35f3935b624f3fd3ebb7f0d6eb0f5", fp: "54b510a7ada2f20b40d2732b051c8c32c1db1ed542658f96a940c91aae1a5bc0"},
		{tool: "charge", args: `{}`,
			intent: "wrap:charge:27102f84c84e552d5efa9aaa47f182631f966bf4c9b6859c33af3b89b171cfd3", fp: "3639b893021d0d6108c6eaeacbfeffa65f9e1459322daf2b8eb2d2b044b0b07b"},
	} {
		id, err := identify("3bc06e237a5ea972b4fb1223a37b844f18c74d399d4a4f2c698a4215acb71c34", c.tool, []byte(c.args), c.ignore, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if id.intent != c.intent || id.fp != c.fp {
			t.Errorf("%s %s: intent %s, fingerprint %s; want %s, %s", c.tool, c.args, id.intent, id.fp, c.intent, c.fp)
		}
	}
}
