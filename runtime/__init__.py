"""The graphtrain runtime: what runs in pods and, unchanged, on one machine."""
