"""The resume and schedule functions, and what every function loads at init (SnapStart hooks, preload)."""
