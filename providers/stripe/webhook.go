package stripe

import (
	"errors"
	"fmt"
	"time"

	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"
)

// DefaultWebhookTolerance is how old a signature's timestamp may be, as
// Stripe's libraries default it.
const DefaultWebhookTolerance = 300 * time.Second

// ErrNoWebhookSecret is returned by [VerifyWebhook] without secrets.
var ErrNoWebhookSecret = errors.New("stripe: no webhook signing secret configured")

// VerifyWebhook checks payload's Stripe-Signature header sigHeader against
// each of secrets in turn (during a rotation, Stripe signs with the old and
// the new secret and the endpoint knows both) and returns the event.
// tolerance bounds the signature's age; 0 means
// [DefaultWebhookTolerance]. The event's API version is not checked
// against stripe-go's. Stripe delivers at least once: dedupe on the
// event's ID. [Provider.VerifyWebhook] does the same with the secrets of
// its Config and maps the event to payonce's terms.
//
// Errors: [ErrNoWebhookSecret]; otherwise stripe-go's webhook errors,
// wrapped: [webhook.ErrNoValidSignature] when no secret matches,
// [webhook.ErrNotSigned], [webhook.ErrInvalidHeader], [webhook.ErrTooOld].
func VerifyWebhook(payload []byte, sigHeader string, secrets []string, tolerance time.Duration) (stripego.Event, error) {
	if len(secrets) == 0 {
		return stripego.Event{}, ErrNoWebhookSecret
	}
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	opts := webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true, Tolerance: tolerance}
	var err error
	for _, secret := range secrets {
		var ev stripego.Event
		ev, err = webhook.ConstructEventWithOptions(payload, sigHeader, secret, opts)
		if err == nil {
			return ev, nil
		}
		if !errors.Is(err, webhook.ErrNoValidSignature) {
			break // a bad header, an old timestamp or a bad body: no other secret helps
		}
	}
	return stripego.Event{}, fmt.Errorf("stripe: webhook refused: %w", err)
}
