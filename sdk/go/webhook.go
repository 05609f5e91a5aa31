package ledgerflow

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrWebhookVerification is wrapped by every error of VerifyWebhook (errors.Is).
var ErrWebhookVerification = errors.New("webhook verification failed")

// WebhookTolerance is how far a delivery's webhook-timestamp may be from now (as the Python SDK's
// standardwebhooks library: 5 minutes either way).
const WebhookTolerance = 5 * time.Minute

// WebhookVerifier checks signed deliveries (Standard Webhooks) of a subscription's or automation
// rule's secret ("whsec_" + base64). Now is the clock (nil: time.Now); Tolerance the timestamp's
// tolerance (0: WebhookTolerance).
type WebhookVerifier struct {
	Secret    string           // the subscription's or rule's secret: "whsec_" + base64
	Tolerance time.Duration    // how far the timestamp may be from now (0: WebhookTolerance)
	Now       func() time.Time // the clock (nil: time.Now)
}

// VerifyWebhook checks a delivery as the Python SDK's verify_webhook does: one of the
// webhook-signature header's "v1,<base64>" signatures (two during a secret rotation) must be the
// HMAC-SHA256, with the secret, of "<webhook-id>.<webhook-timestamp>.<body>", and the timestamp
// must be within 5 minutes of now. Pass the raw body bytes exactly as received. Deduplicate
// deliveries on the webhook-id header (a delivery may come more than once).
func VerifyWebhook(secret string, header http.Header, body []byte) error {
	return WebhookVerifier{Secret: secret}.Verify(header, body)
}

// Verify checks one delivery (see VerifyWebhook).
func (v WebhookVerifier) Verify(header http.Header, body []byte) error {
	key, err := webhookKey(v.Secret)
	if err != nil {
		return err
	}
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("%w: missing required headers (webhook-id, webhook-timestamp, webhook-signature)", ErrWebhookVerification)
	}
	secs, err := strconv.ParseFloat(ts, 64)
	if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return fmt.Errorf("%w: invalid webhook-timestamp %q", ErrWebhookVerification, ts)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tolerance := v.Tolerance
	if tolerance == 0 {
		tolerance = WebhookTolerance
	}
	at := time.Unix(0, 0).Add(time.Duration(secs * float64(time.Second)))
	if at.Before(now().Add(-tolerance)) {
		return fmt.Errorf("%w: message timestamp too old", ErrWebhookVerification)
	}
	if at.After(now().Add(tolerance)) {
		return fmt.Errorf("%w: message timestamp too new", ErrWebhookVerification)
	}
	mac := hmac.New(sha256.New, key)
	// the signed timestamp is the whole seconds (as the library signs and compares it)
	fmt.Fprintf(mac, "%s.%d.", id, int64(math.Floor(secs)))
	mac.Write(body)
	expected := mac.Sum(nil)
	for _, versioned := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(versioned, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		if hmac.Equal(expected, got) {
			return nil
		}
	}
	return fmt.Errorf("%w: no matching signature found", ErrWebhookVerification)
}

// SignWebhook makes the webhook-signature value ("v1,<base64>") of a delivery: what the server
// sends, for tests of your receiver.
func SignWebhook(secret, id string, at time.Time, body []byte) (string, error) {
	key, err := webhookKey(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, at.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

func webhookKey(secret string) ([]byte, error) {
	s := strings.TrimPrefix(secret, "whsec_")
	s = strings.TrimRight(s, "=")
	key, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: the secret is not whsec_ followed by base64", ErrWebhookVerification)
	}
	return key, nil
}
