package paypal

import (
	"encoding/json"
	"fmt"

	"github.com/payonce/payonce/money"
)

// Amount is PayPal's money: an ISO 4217 code and a decimal string with PayPal's number of
// decimal places for the currency ("10.50" EUR, "1050" JPY, "10" HUF; see [AmountOf]).
type Amount struct {
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
}

// Money parses a as money.Money. Errors: money's (*money.Error) for an unknown currency or a
// value that is not a decimal amount of it.
func (a Amount) Money() (money.Money, error) {
	c, err := money.ParseCurrency(a.CurrencyCode)
	if err != nil {
		return money.Money{}, err
	}
	return money.Parse(a.Value, c)
}

// OrderRequest is the body of POST /v2/checkout/orders.
type OrderRequest struct {
	Intent        string         `json:"intent"` // "CAPTURE"
	PurchaseUnits []PurchaseUnit `json:"purchase_units"`
	PaymentSource *PaymentSource `json:"payment_source,omitempty"`
}

// PaymentSource is an order's payment source; payonce charges vaulted cards.
type PaymentSource struct {
	Card *CardSource `json:"card,omitempty"`
}

// CardSource is a card payment source.
type CardSource struct {
	// VaultID is a saved card's id (provider.ChargeRequest.PaymentMethod).
	VaultID string `json:"vault_id,omitempty"`
}

// PurchaseUnit is one purchase unit of an order (payonce sends exactly one).
type PurchaseUnit struct {
	ReferenceID string  `json:"reference_id,omitempty"`
	Amount      *Amount `json:"amount,omitempty"`
	// CustomID is payonce's reference (the ProviderKey), at most 127 characters.
	CustomID    string    `json:"custom_id,omitempty"`
	InvoiceID   string    `json:"invoice_id,omitempty"`
	Description string    `json:"description,omitempty"`
	Payments    *Payments `json:"payments,omitempty"` // in responses
}

// Payments lists what happened to a purchase unit.
type Payments struct {
	Captures []Capture `json:"captures,omitempty"`
	Refunds  []Refund  `json:"refunds,omitempty"`
}

// Order is an Orders v2 order. Status: CREATED, SAVED, APPROVED, VOIDED, COMPLETED,
// PAYER_ACTION_REQUIRED.
type Order struct {
	ID            string         `json:"id"`
	Intent        string         `json:"intent,omitempty"`
	Status        string         `json:"status"`
	PurchaseUnits []PurchaseUnit `json:"purchase_units,omitempty"`
	CreateTime    string         `json:"create_time,omitempty"`
	UpdateTime    string         `json:"update_time,omitempty"`
	Links         []Link         `json:"links,omitempty"`
}

// Link is a HATEOAS link.
type Link struct {
	Href   string `json:"href"`
	Rel    string `json:"rel"`
	Method string `json:"method,omitempty"`
}

// Capture is a Payments v2 capture. Status: COMPLETED, DECLINED, PARTIALLY_REFUNDED, PENDING,
// REFUNDED, FAILED.
type Capture struct {
	ID                string             `json:"id"`
	Status            string             `json:"status"`
	StatusDetails     *StatusDetails     `json:"status_details,omitempty"`
	Amount            Amount             `json:"amount"`
	FinalCapture      bool               `json:"final_capture,omitempty"`
	CustomID          string             `json:"custom_id,omitempty"`
	InvoiceID         string             `json:"invoice_id,omitempty"`
	ProcessorResponse *ProcessorResponse `json:"processor_response,omitempty"`
	SupplementaryData *SupplementaryData `json:"supplementary_data,omitempty"`
	CreateTime        string             `json:"create_time,omitempty"`
	UpdateTime        string             `json:"update_time,omitempty"`
	Links             []Link             `json:"links,omitempty"`
}

// StatusDetails says why a capture or refund is in its status.
type StatusDetails struct {
	Reason string `json:"reason"`
}

// ProcessorResponse is the card processor's answer; ResponseCode explains declines ("0051"
// insufficient funds, "0005" do not honor, ...).
type ProcessorResponse struct {
	AVSCode           string `json:"avs_code,omitempty"`
	CVVCode           string `json:"cvv_code,omitempty"`
	ResponseCode      string `json:"response_code,omitempty"`
	PaymentAdviceCode string `json:"payment_advice_code,omitempty"`
}

// SupplementaryData links a capture to its order.
type SupplementaryData struct {
	RelatedIDs struct {
		OrderID string `json:"order_id,omitempty"`
	} `json:"related_ids"`
}

// Refund is a Payments v2 refund. Status: CANCELLED, FAILED, PENDING, COMPLETED.
type Refund struct {
	ID            string         `json:"id"`
	Status        string         `json:"status"`
	StatusDetails *StatusDetails `json:"status_details,omitempty"`
	Amount        Amount         `json:"amount"`
	CustomID      string         `json:"custom_id,omitempty"`
	InvoiceID     string         `json:"invoice_id,omitempty"`
	CreateTime    string         `json:"create_time,omitempty"`
	UpdateTime    string         `json:"update_time,omitempty"`
	Links         []Link         `json:"links,omitempty"`
}

// RefundCaptureRequest is the body of POST /v2/payments/captures/{id}/refund. A nil Amount
// refunds what is left of the capture.
type RefundCaptureRequest struct {
	Amount      *Amount `json:"amount,omitempty"`
	CustomID    string  `json:"custom_id,omitempty"`
	InvoiceID   string  `json:"invoice_id,omitempty"`
	NoteToPayer string  `json:"note_to_payer,omitempty"`
}

// OrderResult is an order as a create or a capture answered it.
type OrderResult struct {
	Order *Order
	// Replayed is true when PayPal answered 200 instead of 201: it had seen the request id and
	// returned the latest status of the order it created (or captured) then.
	Replayed bool
}

// RefundCaptureResult is a refund as PayPal answered it.
type RefundCaptureResult struct {
	Refund *Refund
	// Replayed: 200 instead of 201, the request id was seen before.
	Replayed bool
}

// VerifyWebhookSignatureRequest is the body of POST /v1/notifications/verify-webhook-signature:
// the PAYPAL-* headers of a delivery, the subscription's id and the event as received.
type VerifyWebhookSignatureRequest struct {
	AuthAlgo         string          `json:"auth_algo"`
	CertURL          string          `json:"cert_url"`
	TransmissionID   string          `json:"transmission_id"`
	TransmissionSig  string          `json:"transmission_sig"`
	TransmissionTime string          `json:"transmission_time"`
	WebhookID        string          `json:"webhook_id"`
	WebhookEvent     json.RawMessage `json:"webhook_event"`
}

// Verification statuses of verify-webhook-signature.
const (
	VerificationSuccess = "SUCCESS"
	VerificationFailure = "FAILURE"
)

// capture returns the order's last capture, if any.
func (o *Order) capture() (*Capture, bool) {
	for i := len(o.PurchaseUnits) - 1; i >= 0; i-- {
		if p := o.PurchaseUnits[i].Payments; p != nil && len(p.Captures) > 0 {
			return &p.Captures[len(p.Captures)-1], true
		}
	}
	return nil, false
}

func (o *Order) String() string { return fmt.Sprintf("order %s (%s)", o.ID, o.Status) }
