"""magnetar.client"""
