"""The adversarial suite: each module attacks one class of threat to the store's promises."""
