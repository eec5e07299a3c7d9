"""A script's launcher (torchrun, accelerate launch, fabric run) run under the probe, as the user typed it."""
