package ledgerflow

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// The Standard Webhooks test vector; the signature is what the Python SDK's library (standardwebhooks)
// signs for it.
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS     = 1614265330
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeader(sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", sig)
	return h
}

func at(secs int64) func() time.Time { return func() time.Time { return time.Unix(secs, 0) } }

func TestWebhookVectorVerifies(t *testing.T) {
	v := WebhookVerifier{Secret: vectorSecret, Now: at(vectorTS + 10)}
	if err := v.Verify(vectorHeader(vectorSig), []byte(vectorBody)); err != nil {
		t.Fatal(err)
	}
	sig, err := SignWebhook(vectorSecret, vectorID, time.Unix(vectorTS, 0), []byte(vectorBody))
	if err != nil || sig != vectorSig {
		t.Fatal(sig, err)
	}
	// during a rotation two signatures come; either one matching is enough
	if err := v.Verify(vectorHeader("v1,AAAA "+vectorSig), []byte(vectorBody)); err != nil {
		t.Fatal(err)
	}
}

func TestWebhookRefusals(t *testing.T) {
	v := WebhookVerifier{Secret: vectorSecret, Now: at(vectorTS)}
	cases := map[string]struct {
		h    http.Header
		body string
		v    WebhookVerifier
	}{
		"changed body":   {vectorHeader(vectorSig), `{"test": 2432232315}`, v},
		"wrong version":  {vectorHeader("v2," + vectorSig[3:]), vectorBody, v},
		"missing header": {http.Header{"Webhook-Id": {vectorID}}, vectorBody, v},
		"too old":        {vectorHeader(vectorSig), vectorBody, WebhookVerifier{Secret: vectorSecret, Now: at(vectorTS + 301)}},
		"too new":        {vectorHeader(vectorSig), vectorBody, WebhookVerifier{Secret: vectorSecret, Now: at(vectorTS - 301)}},
		"other secret":   {vectorHeader(vectorSig), vectorBody, WebhookVerifier{Secret: "whsec_" + "c2VjcmV0", Now: at(vectorTS)}},
	}
	for name, c := range cases {
		if err := c.v.Verify(c.h, []byte(c.body)); !errors.Is(err, ErrWebhookVerification) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
