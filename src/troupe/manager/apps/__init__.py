"""Apps in main1 (Jupyter, TensorBoard, any web port) served through the manager."""
