"""The DeepSpeed config rendered for a machine and a profile: the claim's template with the profile's
overrides, every key checked against DeepSpeed's config classes, the CPU accelerator's tuning, the comparison
runs' variants, the communication measurement's runs and the planner's suggestions written as profiles.
Predicts nothing (zerogate.predict does)."""
