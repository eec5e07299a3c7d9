"""Every process of a user's script that trains, and of a kit run at N devices: followed, observed and gathered into one
result."""
