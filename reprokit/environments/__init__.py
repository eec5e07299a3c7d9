"""What a run needs first: virtualenvs, images, host checks, datasets, scripts' wheels."""
