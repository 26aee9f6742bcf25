package core

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
)

// IntentKeyLen is the length of an intent key in hex characters: 128 bits
// of an HMAC-SHA256.
const IntentKeyLen = 32

// intentLabel separates the intent keys' HMAC key from the other uses of
// the deployment's secret (password-reset tokens are HMAC(secret,
// downstream key)): the intent keys are keyed by HMAC(secret, intentLabel).
const intentLabel = "idemgate intent key v1"

// IntentKeyer derives intent keys from a deployment's secret. The zero
// value (no secret) derives none.
type IntentKeyer struct {
	key []byte
}

// NewIntentKeyer returns the keyer of secret; an empty secret derives no
// intent keys (downstream keys then come from the operation id).
func NewIntentKeyer(secret []byte) IntentKeyer {
	if len(secret) == 0 {
		return IntentKeyer{}
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(intentLabel))
	return IntentKeyer{key: m.Sum(nil)}
}

// Key returns the intent key of (tenant, tool, key, fingerprint): the first
// IntentKeyLen hex characters of an HMAC-SHA256 under the secret of each
// field, length-prefixed so that no two field lists share an input. It is
// the same for the same intent in any database of the deployment (the
// client re-sends all four), distinct across tenants, tools, keys and
// fingerprints, and reveals none of them to whoever sees the downstream
// key (Stripe, a mail's receiver) without the secret. "" when the keyer
// has no secret.
func (k IntentKeyer) Key(tenantID, tool, idempotencyKey, argsHash string) string {
	if k.key == nil {
		return ""
	}
	m := hmac.New(sha256.New, k.key)
	var n [8]byte
	for _, f := range []string{tenantID, tool, idempotencyKey, argsHash} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return hex.EncodeToString(m.Sum(nil))[:IntentKeyLen]
}

// DownstreamKey is the downstream key of a generation, as the engines
// compute their generated column: "idg_" + the intent key (the operation id
// for a claim without one: claims from before migration 00012, or a gate
// without a secret) + "r" + the incarnation when it is above 0 + "_" + the
// generation. The incarnation counts the earlier intents of the same
// tenant, tool, key and fingerprint that the key's history remembers.
func DownstreamKey(intentKey, operationID string, incarnation, generation int) string {
	if intentKey == "" {
		intentKey = operationID
	}
	if incarnation > 0 {
		intentKey += "r" + strconv.Itoa(incarnation)
	}
	return "idg_" + intentKey + "_" + strconv.Itoa(generation)
}
