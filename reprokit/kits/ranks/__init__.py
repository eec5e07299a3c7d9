"""Every process of a user's script that trains: followed, observed and gathered into one result."""
