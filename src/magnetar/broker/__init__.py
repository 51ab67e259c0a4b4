"""magnetar.broker"""
