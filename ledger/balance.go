package ledger

// Balance is the money position with one counterparty, in USD. Amounts are
// float64 sums of entry amounts.
type Balance struct {
	// Owed is what we owe the counterparty (payment_owed).
	Owed float64 `json:"owed"`
	// Earned is what the counterparty owes us (payment_earned).
	Earned float64 `json:"earned"`
	// Credits is preemption credits received from the counterparty minus
	// those granted to it.
	Credits float64 `json:"credits"`
	// Net is Earned - Owed + Credits: positive when the counterparty owes
	// us on balance.
	Net float64 `json:"net"`
}

// Balances returns the balance per counterparty over the whole ledger.
// Receipts, successions and disputes do not move balances.
func (db *DB) Balances() (map[string]Balance, error) {
	out := make(map[string]Balance)
	err := db.scan(Filter{}, func(e *Entry) error {
		if e.Kind == KindReceipt || e.Kind == KindSuccession || e.Kind == KindDispute {
			return nil
		}
		b := out[e.Counterparty]
		switch e.Kind {
		case KindPaymentOwed:
			b.Owed += e.Amount
		case KindPaymentEarned:
			b.Earned += e.Amount
		case KindPreemptionCredit:
			if e.Direction == DirCreditGranted {
				b.Credits -= e.Amount
			} else {
				b.Credits += e.Amount
			}
		}
		b.Net = b.Earned - b.Owed + b.Credits
		out[e.Counterparty] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
