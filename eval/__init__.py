"""Evaluation: HellaSwag in the training loop (hellaswag), the lm-evaluation-harness
adapter and CLI (harness), Hugging Face export (export_hf). scoring holds what they
share: tokenising for evaluation and continuation log-likelihoods."""
